"""docs/protocol.md#receipts, over HTTP against the real server."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from coordinator.protocol.receipts import canonical_json
from tests.integration.kit import (
    DUO,
    PHASES,
    SOLO,
    acquire_body,
    assert_error,
    jcs_hash,
    receipt_body,
    ticket_body,
)

if TYPE_CHECKING:
    from tests.harness import Running

VECTORS = Path(__file__).resolve().parents[1] / "data" / "jcs_vectors"


async def _held(server: Running, lane: str = SOLO, **kw: Any) -> str:
    r = await server.ok("acquire", acquire_body(lane=lane, **kw))
    tid: str = r["ticket"]["ticketId"]
    return tid


async def test_new_receipt_is_201_then_replay_200_then_conflict_409(server: Running) -> None:
    tid = await _held(server)
    body = receipt_body(SOLO, tid, payload={"refs": 3, "hash": "abc"})
    r = await server.op("receipt", body)
    assert r.status == 201, r.text
    assert r.body == {
        "coordinator": "actor-sqlite",
        "stored": True,
        "replay": False,
        "contentHashVerified": True,
    }
    r = await server.op("receipt", body)
    assert r.status == 200
    assert r.body == {
        "coordinator": "actor-sqlite",
        "stored": False,
        "replay": True,
        "contentHashVerified": True,
    }
    # same receiptId, another contentHash (the id's hash part need not match it)
    other = dict(body, payload={"refs": 4}, contentHash=jcs_hash({"refs": 4}))
    assert_error(await server.op("receipt", other), 409, "receipt-conflict", "receiptId")
    st = await server.ok("status", {"lane": SOLO, "includeReceipts": True})
    [row] = st["recentReceipts"]
    assert row["payload"] == {"refs": 3, "hash": "abc"}  # never updated


async def test_every_phase_is_accepted(server: Running) -> None:
    tid = await _held(server)
    for phase in PHASES:
        r = await server.op("receipt", receipt_body(SOLO, tid, phase=phase, payload={"p": phase}))
        assert r.status == 201, r.text
    assert_error(
        await server.op("receipt", receipt_body(SOLO, tid, phase="provider-started")),
        400,
        "bad-request",
        "phase",
    )


async def test_writer_must_be_the_holder_machine(server: Running) -> None:
    tid = await _held(server)
    r = await server.op("receipt", receipt_body(SOLO, tid, machine="mB", claim="cB"))
    assert_error(r, 403, "not-holder", "machineId")
    # the holder machine with another claim (or none) may write: the machine decides
    r = await server.op("receipt", receipt_body(SOLO, tid, machine="mA", claim=None))
    assert r.status == 201, r.text


async def test_liveness_is_not_required(server: Running) -> None:
    tid = await _held(server)
    await server.ok("release", ticket_body(SOLO, tid, outcome="completed"))
    r = await server.op("receipt", receipt_body(SOLO, tid, phase="provider-terminal"))
    assert r.status == 201, r.text
    # ...and an expired one (it held the slot) may still get its evidence written
    e = await _held(server, machine="mE", claim="cE", prompt="e", leaseSeconds=15)
    server.clock.advance(15)
    st = await server.ok("status", {"lane": SOLO})
    assert e not in {t["ticketId"] for t in st["held"]}
    r = await server.op("receipt", receipt_body(SOLO, e, machine="mE", claim="cE"))
    assert r.status == 201, r.text


async def test_a_ticket_that_never_held_the_slot_takes_no_receipt(server: Running) -> None:
    """A receipt is evidence of a lease: only a ticket that is or was held (heldAt set)."""
    holder = await _held(server)
    q = await _held(server, machine="mQ", claim="cQ", prompt="q")  # queued behind holder
    for phase in PHASES:
        r = await server.op("receipt", receipt_body(SOLO, q, phase, machine="mQ", claim="cQ"))
        assert_error(r, 403, "not-holder", "never held")
    # released while still queued: done, never held
    await server.ok("release", ticket_body(SOLO, q, "mQ", "cQ", outcome="abandoned"))
    r = await server.op("receipt", receipt_body(SOLO, q, machine="mQ", claim="cQ"))
    assert_error(r, 403, "not-holder", "never held")
    st = await server.ok("status", {"lane": SOLO, "includeReceipts": True})
    assert st["recentReceipts"] == []
    # once granted, the same owner's write is stored
    w = await _held(server, machine="mW", claim="cW", prompt="w")
    r = await server.op("receipt", receipt_body(SOLO, w, machine="mW", claim="cW"))
    assert_error(r, 403, "not-holder")
    await server.ok("release", ticket_body(SOLO, holder, outcome="completed"))
    r = await server.op("receipt", receipt_body(SOLO, w, machine="mW", claim="cW"))
    assert r.status == 201, r.text


@pytest.mark.parametrize(
    "make_id",
    [
        lambda t, p, h: f"t_other:{p}:{h}",  # another ticket
        lambda t, p, h: f"{t}:provider-terminal:{h}",  # another phase
        lambda t, p, h: f"{t}:{p}:{h[:15]}",  # short hash part
        lambda t, p, h: f"{t}:{p}:{h.upper()}",  # not lowercase hex
        lambda t, p, h: f"{t}:{p}",  # no hash part
        lambda t, p, h: f"{t}{p}{h}",  # no separators
        lambda t, p, h: f"{t}:{p}:{h}:extra",
        lambda t, p, h: f"{t}:{p}:{h}\n",  # a trailing newline is not the shape
    ],
)
async def test_receipt_id_shape_mismatch_is_400(server: Running, make_id: Any) -> None:
    tid = await _held(server)
    body = receipt_body(SOLO, tid)
    h = body["contentHash"].removeprefix("sha256:")[:16]
    body["receiptId"] = make_id(tid, "lease-acquired", h)
    assert_error(await server.op("receipt", body), 400, "bad-request", "receiptId")


async def test_receipt_id_hash_part_need_not_match_the_content_hash(server: Running) -> None:
    tid = await _held(server)
    body = receipt_body(SOLO, tid, receipt_id=f"{tid}:lease-acquired:{'0' * 16}")
    r = await server.op("receipt", body)
    assert r.status == 201 and r["contentHashVerified"] is True


async def test_hash_mismatch_is_stored_and_flagged(server: Running) -> None:
    tid = await _held(server)
    wrong = "sha256:" + hashlib.sha256(b"something else").hexdigest()
    body = receipt_body(SOLO, tid, payload={"a": 1}, content_hash=wrong)
    r = await server.op("receipt", body)
    assert r.status == 201, r.text
    assert r["stored"] is True and r["contentHashVerified"] is False
    r = await server.op("receipt", body)
    assert r.status == 200 and r["replay"] is True and r["contentHashVerified"] is False
    st = await server.ok("status", {"lane": SOLO, "includeReceipts": True})
    [row] = st["recentReceipts"]
    assert row["contentHashVerified"] is False and row["contentHash"] == wrong
    inc = await server.get("/v1/incidents", params={"lane": SOLO})
    found = [i for i in inc["incidents"] if i["kind"] == "receipt-hash-mismatch"]
    assert len(found) == 1 and found[0]["ticketId"] == tid


async def test_payload_over_32_kib_is_400(server: Running) -> None:
    tid = await _held(server)
    big = {"blob": "x" * (32 * 1024)}
    assert_error(
        await server.op("receipt", receipt_body(SOLO, tid, payload=big)),
        400,
        "bad-request",
        "payload",
    )
    ok = {"blob": "x" * (32 * 1024 - 20)}  # canonical form {"blob":"..."} is 32 KiB - 9
    r = await server.op("receipt", receipt_body(SOLO, tid, payload=ok))
    assert r.status == 201, r.text


async def _send_raw(server: Running, tid: str, phase: str, number: str, h: str) -> Any:
    """A receipt whose payload is {"n": <number>} exactly as `number` is written."""
    body = receipt_body(SOLO, tid, phase=phase, payload={"n": 1}, content_hash=h)
    text = json.dumps({"protocolVersion": 1, **body}).replace('{"n": 1}', '{"n": ' + number + "}")
    return await server.request(
        "POST",
        "/v1/lanes/receipt",
        data=text.encode(),
        headers={"Content-Type": "application/json"},
    )


@pytest.mark.parametrize(
    ("as_integer", "as_float", "canonical"),
    [
        ("1000000000000000000000", "1e21", b'{"n":1e+21}'),
        ("1" + "0" * 30, "1E30", b'{"n":1e+30}'),
        ("10000000000000000", "1.0e16", b'{"n":10000000000000000}'),
        ("-9007199254740992", "-9007199254740992.0", b'{"n":-9007199254740992}'),
    ],
)
async def test_a_number_is_the_same_double_however_it_is_written(
    server: Running, as_integer: str, as_float: str, canonical: bytes
) -> None:
    """RFC 8785 reads every number as an IEEE 754 double: the integer spelling of a value
    beyond ±(2^53−1) is accepted and verified exactly as its float spelling is (before, the
    float was verified and the integer refused), and both store the same canonical payload."""
    tid = await _held(server)
    h = "sha256:" + hashlib.sha256(canonical).hexdigest()
    for phase, number in (("lease-acquired", as_integer), ("provider-terminal", as_float)):
        r = await _send_raw(server, tid, phase, number, h)
        assert r.status == 201 and r["contentHashVerified"] is True, (number, r.text)
    st = await server.ok("status", {"lane": SOLO, "includeReceipts": True})
    stored = {x["phase"]: x["payload"] for x in st["recentReceipts"] if x["ticketId"] == tid}
    assert stored["lease-acquired"] == stored["provider-terminal"] == json.loads(canonical)
    assert canonical_json(json.loads('{"n":' + as_integer + "}")) == canonical  # the client's


@pytest.mark.parametrize("number", ["1" + "0" * 400, "-" + "1" * 310, "1e400", "-1E309"])
async def test_a_number_beyond_the_double_range_is_400(server: Running, number: str) -> None:
    tid = await _held(server)
    r = await _send_raw(server, tid, "lease-acquired", number, "sha256:" + "0" * 64)
    assert_error(r, 400, "bad-request")
    assert "payload" in r.message or "body" in r.message, r.message


async def test_largest_safe_integer_is_accepted(server: Running) -> None:
    tid = await _held(server)
    payload = {"n": 2**53 - 1, "m": -(2**53 - 1)}
    r = await server.op("receipt", receipt_body(SOLO, tid, payload=payload))
    assert r.status == 201 and r["contentHashVerified"] is True


@pytest.mark.parametrize("payload", [[1, 2], "text", 3, None, True])
async def test_payload_must_be_an_object(server: Running, payload: Any) -> None:
    tid = await _held(server)
    body = receipt_body(SOLO, tid)
    body["payload"] = payload
    assert_error(await server.op("receipt", body), 400, "bad-request", "payload")


@pytest.mark.parametrize(
    "bad",
    [
        "sha256:" + "A" * 64,
        "sha256:" + "a" * 63,
        "md5:" + "a" * 64,
        "a" * 64,
        "",
        "sha256:" + "a" * 64 + "\n",
    ],
)
async def test_content_hash_shape(server: Running, bad: str) -> None:
    tid = await _held(server)
    body = receipt_body(SOLO, tid)
    body["contentHash"] = bad
    assert_error(await server.op("receipt", body), 400, "bad-request", "contentHash")


async def test_receipt_for_unknown_ticket_is_404(server: Running) -> None:
    await _held(server)
    assert_error(await server.op("receipt", receipt_body(SOLO, "t_nope")), 404, "not-found")
    assert_error(await server.op("receipt", receipt_body(DUO, "t_nope")), 404, "not-found")


def _vectors() -> list[tuple[str, str, bytes]]:
    out = []
    for inp in sorted((VECTORS / "input").glob("*.json")):
        raw = inp.read_text(encoding="utf-8")
        expected = (VECTORS / "output" / inp.name).read_bytes()
        if raw.lstrip().startswith("["):  # payloads are objects: wrap the array
            raw, expected = '{"v":' + raw + "}", b'{"v":' + expected + b"}"
        out.append((inp.stem, raw, expected))
    return out


@pytest.mark.parametrize(("name", "raw", "canonical"), _vectors(), ids=lambda v: str(v)[:12])
async def test_server_verifies_rfc8785_hashes(
    server: Running, name: str, raw: str, canonical: bytes
) -> None:
    """The payload goes over the wire as the vector's own text; the server's verdict must be
    true for the hash of the reference canonical bytes, and false for another hash."""
    tid = await _held(server)
    good = "sha256:" + hashlib.sha256(canonical).hexdigest()
    for phase, h, verdict in (
        ("lease-acquired", good, True),
        ("provider-terminal", "sha256:" + hashlib.sha256(canonical + b" ").hexdigest(), False),
    ):
        rid = f"{tid}:{phase}:{h[7:23]}"
        head = json.dumps(
            {
                "protocolVersion": 1,
                "lane": SOLO,
                "machineId": "mA",
                "ticketId": tid,
                "receiptId": rid,
                "phase": phase,
                "contentHash": h,
            }
        )
        text = head[:-1] + ', "payload": ' + raw + "}"
        r = await server.request(
            "POST",
            "/v1/lanes/receipt",
            data=text.encode("utf-8"),
            headers={"Content-Type": "application/json"},
        )
        assert r.status == 201, (name, r.text)
        assert r["contentHashVerified"] is verdict, name


async def test_a_deeply_nested_payload_is_400_not_a_crash(server: Running) -> None:
    tid = await _held(server)
    body = receipt_body(SOLO, tid, payload={"n": 1})
    deep = "[" * 20_000 + "]" * 20_000
    text = json.dumps({"protocolVersion": 1, **body}).replace('{"n": 1}', '{"d": ' + deep + "}")
    r = await server.request(
        "POST",
        "/v1/lanes/receipt",
        data=text.encode(),
        headers={"Content-Type": "application/json"},
    )
    assert_error(r, 400, "bad-request", "nested")
    st = await server.ok("status", {"lane": SOLO, "includeReceipts": True})
    assert st["recentReceipts"] == [] and [t["ticketId"] for t in st["held"]] == [tid]
