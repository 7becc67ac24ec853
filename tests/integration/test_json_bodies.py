"""JSON bodies the parser takes but the protocol must not: a receipt payload nested deeper
than MAX_JSON_DEPTH (refused on write; a deeper one stored by an older version reads back as
a marker, never a 503) and a key given twice in one object (refused, naming the key)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from coordinator.protocol.constants import MAX_JSON_DEPTH
from coordinator.protocol.errors import BadRequest
from coordinator.protocol.receipts import (
    PAYLOAD_OMITTED_KEY,
    canonical_json,
    stored_payload,
    walk_json,
)
from coordinator.protocol.requests import decode_body
from tests.integration.kit import SOLO, acquire_body, assert_error, receipt_body

if TYPE_CHECKING:
    from tests.harness import Running, StartServer

JSON = {"Content-Type": "application/json"}
HEAD = f'{{"protocolVersion":1,"lane":"{SOLO}"'  # a status body, without its closing brace


def nested(depth: int) -> dict[str, Any]:
    """{"a": {"a": ... {"n": 1}}}: `depth` objects in all (the outer one is level 1)."""
    value: dict[str, Any] = {"n": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def nested_text(depth: int) -> str:
    """nested(depth) as JSON text, built without recursion (any depth)."""
    return '{"a":' * (depth - 1) + '{"n":1}' + "}" * (depth - 1)


def receipt_text(ticket_id: str, depth: int) -> bytes:
    """A receipt body whose payload nests `depth` levels, written by hand: json.dumps and
    RFC 8785 recurse, so the test could not even build one 980 deep. The hash is a dummy:
    the depth is refused before it is looked at."""
    rid = f"{ticket_id}:lease-acquired:{'0' * 16}"
    return (
        f'{{"protocolVersion":1,"lane":"{SOLO}","machineId":"mA","claimId":"cA",'
        f'"ticketId":"{ticket_id}","receiptId":"{rid}","phase":"lease-acquired",'
        f'"contentHash":"sha256:{"0" * 64}","payload":{nested_text(depth)}}}'
    ).encode()


async def _held(server: Running) -> str:
    r = await server.ok("acquire", acquire_body())
    tid: str = r["ticket"]["ticketId"]
    return tid


def payloads(reply: Any) -> list[Any]:
    """Every `payload` value anywhere in a reply."""
    found: list[Any] = []
    stack = [reply]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if "payload" in v:
                found.append(v["payload"])
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return found


# ---------------------------------------------------------------- depth on write


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 200, 980, 5000])
async def test_a_payload_nested_deeper_than_the_bound_is_400(server: Running, depth: int) -> None:
    tid = await _held(server)
    r = await server.request(
        "POST", "/v1/lanes/receipt", data=receipt_text(tid, depth), headers=JSON
    )
    assert_error(r, 400, "bad-request", "payload")
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in r.message, r.message
    status = await server.ok("status", {"lane": SOLO, "includeReceipts": True})
    assert status["recentReceipts"] == []  # nothing stored
    ev = await server.get(f"/v1/evidence?lane={SOLO}&ticketId={tid}")
    assert ev.status == 200, ev.text


async def test_a_payload_at_the_bound_is_stored_and_read_back(server: Running) -> None:
    tid = await _held(server)
    payload = nested(MAX_JSON_DEPTH)
    r = await server.op("receipt", receipt_body(SOLO, tid, payload=payload))
    assert r.status == 201, r.text
    status = await server.ok("status", {"lane": SOLO, "includeReceipts": True})
    assert payloads(status) == [payload]
    ev = await server.get(f"/v1/evidence?lane={SOLO}&ticketId={tid}")
    assert ev.status == 200, ev.text
    assert payloads(ev.body) == [payload]


async def test_any_body_value_nested_too_deep_is_400_naming_it(server: Running) -> None:
    raw = HEAD + ',"extra":' + nested_text(MAX_JSON_DEPTH + 1) + "}"
    r = await server.request("POST", "/v1/lanes/status", data=raw.encode(), headers=JSON)
    assert_error(r, 400, "bad-request", "extra")


def test_the_client_side_canonical_form_refuses_the_same_depth() -> None:
    """LocalQueue and the driver hash payloads with the same function: the same bound."""
    assert canonical_json(nested(MAX_JSON_DEPTH))
    with pytest.raises(BadRequest, match=f"payload: nested deeper than {MAX_JSON_DEPTH}"):
        canonical_json(nested(MAX_JSON_DEPTH + 1))


# ---------------------------------------------------------------- depth on read


def test_a_stored_payload_too_deep_reads_back_as_a_marker() -> None:
    assert stored_payload('{"a":1}') == {"a": 1}
    assert stored_payload(nested_text(MAX_JSON_DEPTH)) == nested(MAX_JSON_DEPTH)
    for depth in (MAX_JSON_DEPTH + 1, 980, 100_000):
        marker = stored_payload(nested_text(depth))
        assert set(marker) == {PAYLOAD_OMITTED_KEY}, depth
        assert f"deeper than {MAX_JSON_DEPTH}" in marker[PAYLOAD_OMITTED_KEY]
    assert set(stored_payload("[1]")) == {PAYLOAD_OMITTED_KEY}
    assert set(stored_payload("{not json")) == {PAYLOAD_OMITTED_KEY}


async def test_a_deep_payload_stored_by_an_older_version_never_breaks_reads(
    start_server: StartServer, tmp_path: Path
) -> None:
    data = tmp_path / "old"
    srv = await start_server(data_dir=data)
    tid = await _held(srv)
    assert (await srv.op("receipt", receipt_body(SOLO, tid))).status == 201
    await srv.stop()
    db = sqlite3.connect(data / "solo+main.sqlite")  # what a version without the bound kept
    with db:
        db.execute("UPDATE receipts SET payload = ?", (nested_text(5000),))
    db.close()
    srv = await start_server(data_dir=data)
    status = await srv.op("status", {"lane": SOLO, "includeReceipts": True})
    ev = await srv.get(f"/v1/evidence?lane={SOLO}&ticketId={tid}")
    assert status.status == 200, status.text
    assert ev.status == 200, ev.text
    for reply in (status.body, ev.body):
        [marker] = payloads(reply)
        assert set(marker) == {PAYLOAD_OMITTED_KEY}


# ---------------------------------------------------------------- duplicate keys


DUPLICATES = [
    (HEAD + ',"lane":"duo:main"}', "lane"),
    (HEAD + ',"l\\u0061ne":"duo:main"}', "lane"),  # the same key, spelled with an escape
    ('{"protocolVersion":1,' + HEAD[1:] + "}", "protocolVersion"),
    (HEAD + ',"x":{"k":"a:b","k":1}}', "k"),
    (HEAD + ',"x":[{"k":1},{"k":2,"k":3}]}', "k"),
    (HEAD + ',"n":"\\u003a","n":"::"}', "n"),  # an escaped ':' must not hide it
]


@pytest.mark.parametrize(("raw", "key"), DUPLICATES)
async def test_a_key_given_twice_is_400_naming_it(server: Running, raw: str, key: str) -> None:
    r = await server.request("POST", "/v1/lanes/status", data=raw.encode(), headers=JSON)
    assert_error(r, 400, "bad-request")
    assert f"duplicate key '{key}'" in r.message, r.message


async def test_a_duplicate_inside_a_receipt_payload_is_400(server: Running) -> None:
    tid = await _held(server)
    raw = receipt_text(tid, 1).replace(b'{"n":1}', b'{"n":1,"n":2}')
    r = await server.request("POST", "/v1/lanes/receipt", data=raw, headers=JSON)
    assert_error(r, 400, "bad-request")
    assert "duplicate key 'n'" in r.message


@pytest.mark.parametrize(
    "raw",
    [
        b'{"protocolVersion":1,"lane":"solo:main"}',
        b'{"protocolVersion":1,"lane":"solo:main","note":"a:b:c","x":{"k:":"::"}}',
        b'{"protocolVersion":1,"lane":"solo:main","x":[{"k":1},{"k":2}],"y":{"k":{"k":1}}}',
        b'{"protocolVersion":1,"lane":"solo:main","n":"\\u003a","m":"\\u00e9"}',
        b'{ "protocolVersion" : 1 , "lane" : "solo:main" }',
    ],
)
def test_bodies_without_duplicates_pass(raw: bytes) -> None:
    body = decode_body(raw)
    assert body["lane"] == "solo:main"


def test_the_key_count_matches_what_the_fast_path_assumes() -> None:
    keys, colons, too_deep = walk_json({"a": "x:y", "b": [{"c:": 1}, {"d": "::"}], "e": {}})
    assert (keys, colons, too_deep) == (5, 4, None)
