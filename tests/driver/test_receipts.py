"""Receipts (docs/protocol.md#receipts, docs/protocol.md#driver-rules): ids and RFC 8785 hashes, the
payload checker, and writes that are dropped — never fatal — when refused or unreachable."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from client.api import NO_RETRY, LaneClient
from client.driver import Turn
from client.driver.payload_check import check_payload
from client.driver.receipts import (
    PHASES,
    Receipts,
    content_hash,
    hash_bytes,
    hash_file,
    lease_acquired_payload,
    provider_submitted_payload,
    provider_terminal_payload,
    receipt_id,
    references_applied_payload,
)
from client.local import LocalQueue
from tests.harness import ThreadedCoordinator

from .kit import LANE, FakeProvider

H = "sha256:" + "12" * 32
Clients = Callable[..., LaneClient]
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)

REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"prompt": "a cat"}, "prompt"),
    ({"promptText": "cat"}, "prompt"),
    ({"negative_prompt": "dog"}, "prompt"),
    ({"filePath": "x"}, "file"),
    ({"referenceFilename": "x"}, "filename"),
    ({"outputDir": "x"}, "dir"),
    ({"apiKey": "x"}, "key"),
    ({"password": "x"}, "password"),
    ({"sessionToken": "x"}, "token"),
    ({"account": "x"}, "account"),
    ({"accountName": "x"}, "account"),
    ({"email": "x"}, "email"),
    ({"signedUrl": "x"}, "url"),
    ({"a prompt as a key": 1}, "whitespace"),
    ({"ref": "/Users/me/refs/cat.png"}, "path"),
    ({"ref": "refs/cat.png"}, "path"),
    ({"ref": "C:\\refs\\cat.png"}, "path"),
    ({"ref": "~/refs"}, "path"),
    ({"ref": "cat.png"}, "file name"),
    ({"ref": "https://cdn.example.com/x?sig=abc"}, "path"),
    ({"note": "a red fox jumps over the lazy dog at dawn"}, "free text"),
    ({"note": "one\ntwo"}, "free text"),
    ({"auth": "x"}, "auth"),
    ({"header": "Bearer abcdef"}, "Authorization"),
    ({"x": JWT}, "JWT"),
    ({"x": "sk-abcdefghijklmnop1234"}, "secret"),
    ({"x": "ghp_16C7e42F292c6912E7710c838347Ae178B4a"}, "secret"),
    ({"x": "a8F3kQ9zL2mN7pR4tV6wY1bC5dE0gH"}, "token"),
    ({"x": "t_" + "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg"}, "token"),
    ({"x": "me@example.com"}, "e-mail"),
    ({"x": "main-unlimited"}, "account name"),
    ({"x": f"lane {LANE}"}, "lane"),
    ({"x": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}, "token"),
    ({"nested": {"deeper": {"prompt": "x"}}}, "prompt"),
    ({"list": ["ok", "/etc/passwd"]}, "path"),
    ({"n": float("nan")}, "finite"),
    ({"n": 2**60}, "2^53"),
    ({"n": 1e21}, "2^53"),  # the same value as 10**21: refused however it is written
    ({"n": -1e16}, "2^53"),
    ({"b": b"bytes"}, "JSON value"),
    ({"x": "y" * 300}, "256"),
]

ALLOWED: list[dict[str, Any]] = [
    lease_acquired_payload(prompt_hash=H, fence=3, lease_seconds=60),
    references_applied_payload([hash_bytes(b"a"), hash_bytes(b"b")], required_slots=2),
    provider_submitted_payload("simjob-1a2b3c4d5e6f", attempt=1),
    provider_submitted_payload("a8F3kQ9zL2mN7pR4tV6wY1bC5dE0gH"),  # a provider job id
    provider_terminal_payload("job-1", "completed", output_hashes=[hash_bytes(b"v")]),
    {"promptHash": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},
    {"promptHash": "h1", "tokenCount": 12, "fileCount": 3, "sceneCount": 2},
    {"status": "completed", "note": "slot busy", "mode": "image-to-video", "ok": True},
    {"providerMediaIds": ["med_8Hq2LmZ0pX4vR9sK1tY7wB3"], "wallet": None, "ratio": 1.5},
    {"route": "seedance-direct", "version": "v1.2", "drill": "shared-queue-drill-a"},
]


@pytest.mark.parametrize(("payload", "why"), REFUSED, ids=[w for _, w in REFUSED])
def test_checker_refuses_prompts_paths_tokens_and_accounts(
    payload: dict[str, Any], why: str
) -> None:
    with pytest.raises(ValueError, match="payload") as err:
        check_payload(payload, lane="seedance-direct:main-unlimited" if why != "lane" else LANE)
    assert why.lower() in str(err.value).lower()


@pytest.mark.parametrize("payload", ALLOWED)
def test_checker_accepts_hashes_ids_and_counts(payload: dict[str, Any]) -> None:
    check_payload(payload, lane=LANE)


def test_builders_take_hashes_ids_and_counts_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sha256"):
        references_applied_payload(["/refs/cat.png"])
    with pytest.raises(ValueError, match="status"):
        provider_terminal_payload("job", "exploded")
    with pytest.raises(ValueError, match="non-negative"):
        references_applied_payload([], required_slots=-1)
    f = tmp_path / "ref.png"
    f.write_bytes(b"\x89PNG fake")
    assert hash_file(f) == hash_bytes(b"\x89PNG fake")
    assert hash_bytes(b"") == "sha256:" + hashlib.sha256(b"").hexdigest()
    p = provider_terminal_payload("job", "failed", output_hashes=[hash_bytes(b"1")])
    assert p == {"providerJobId": "job", "status": "failed", "outputHashes": [hash_bytes(b"1")],
                 "outputCount": 1}  # fmt: skip


def test_ids_and_hashes_are_rfc8785_sha256() -> None:
    payload: dict[str, Any] = {"z": 1, "a": [1.0, 2.5e-7, "é"], "é": {"b": None, "A": True}}
    expected = "sha256:" + hashlib.sha256(rfc8785.dumps(payload)).hexdigest()
    assert content_hash(payload) == expected
    for phase in PHASES:
        assert receipt_id("t_abc", phase, payload) == f"t_abc:{phase}:{expected[7:23]}"
    with pytest.raises(ValueError, match="phase"):
        receipt_id("t_abc", "bogus", payload)


async def test_a_refused_payload_is_never_sent(
    coord: ThreadedCoordinator, clients: Clients
) -> None:
    a = clients()
    async with Turn(a, LANE, "proj", "scene-1", H, receipts=False) as turn:
        assert turn.receipts is not None and turn.ticket_id is not None
        before = coord.hits.get("/v1/lanes/receipt", 0)
        with pytest.raises(ValueError, match="prompt"):
            await turn.receipts.write("references-applied", {"prompt": "a cat at dawn"})
        with pytest.raises(ValueError, match="phase"):
            await turn.receipts.write("lease-granted", {"fence": 1})
        assert coord.hits.get("/v1/lanes/receipt", 0) == before


async def test_refused_writes_are_dropped_not_fatal(
    clients: Clients, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = clients("studio-a", "claim-a"), clients("studio-b", "claim-b")
    caplog.set_level(logging.WARNING, logger="lane.receipts")
    async with Turn(a, LANE, "proj", "scene-1", H, receipts=False) as turn:
        assert turn.ticket_id is not None
        # 403 not-holder: another machine writes on a's ticket
        other = Receipts(b, LANE, turn.ticket_id)
        assert await other.provider_submitted("job-1") is None
        assert [d.reason for d in other.dropped] == ["not-holder (HTTP 403)"]
        # 409 receipt-conflict: the same receiptId already holds other content
        mine = Receipts(a, LANE, turn.ticket_id)
        payload = provider_submitted_payload("job-1")
        rid = receipt_id(turn.ticket_id, "provider-submitted", payload)
        first = await a.receipt(LANE, turn.ticket_id, "provider-submitted", {"providerJobId": "x"},
                                receipt_id=rid)  # fmt: skip
        assert first.stored
        assert await mine.write("provider-submitted", payload) is None
        assert [d.reason for d in mine.dropped] == ["receipt-conflict (HTTP 409)"]
        assert mine.dropped[0].receipt_id == rid
        # the same facts again are a replay, not a conflict
        again = Receipts(a, LANE, turn.ticket_id)
        r1 = await again.references_applied([hash_bytes(b"r")])
        r2 = await again.references_applied([hash_bytes(b"r")])
        assert r1 is not None and r1.stored and r2 is not None and r2.replay
    assert turn.release_reply is not None and turn.release_reply.outcome == "completed"
    assert sum("dropped" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.parametrize("required", [False, True])
async def test_unreachable_coordinator_drops_the_receipt(refused_port: int, required: bool) -> None:
    gone = LaneClient(f"http://127.0.0.1:{refused_port}", "x" * 40, "studio-a", "claim-a",
                      required=required, timeout=5, retry=NO_RETRY)  # fmt: skip
    try:
        r = Receipts(gone, LANE, "t_" + secrets.token_urlsafe(16))
        assert await r.provider_submitted("job-1") is None
        assert await r.provider_terminal("job-1", "completed") is None
        want = "pre-provider" if required else "unreachable"
        assert [d.reason for d in r.dropped] == [want, want] and r.written == []
    finally:
        await gone.close()


@pytest.mark.parametrize("fault", ["drop", "503"])
async def test_receipt_failures_during_a_turn_do_not_fail_it(
    coord: ThreadedCoordinator, clients: Clients, fault: str
) -> None:
    coord.faults["/v1/lanes/receipt"] = fault
    # even fail-closed: receipts are evidence (no retries: each fault fails at once)
    a = clients("studio-a", "claim-a", required=True, retry=NO_RETRY)
    provider = FakeProvider()
    async with Turn(a, LANE, "proj", "scene-1", H) as turn:
        await turn.references_applied([hash_bytes(b"ref")])
        await turn.submit(provider.submit)
        await turn.poll(provider.poll)
    assert turn.receipts is not None and turn.receipts.written == []
    assert [d.phase for d in turn.receipts.dropped] == list(PHASES)
    assert turn.release_reply is not None and turn.release_reply.outcome == "completed"
    st = await a.status(LANE, include_receipts=True)
    assert st.recent_receipts == []


async def test_receipts_on_the_local_queue_are_a_no_op(tmp_path: Path) -> None:
    q = LocalQueue(tmp_path / "q", "studio-a", "claim-a")
    try:
        r = Receipts(q, LANE, "t_local")
        assert not r.enabled
        assert await r.provider_submitted("job-1") is None
        assert r.written == [] and r.dropped == []
        with pytest.raises(ValueError):
            await r.write("provider-submitted", {"providerJobId": "/tmp/x"})
    finally:
        await q.close()
