"""`lane self-test`: the single-machine engine part of the acceptance drill
(docs/protocol.md#acceptance-drill).

Runs against the configured shared coordinator on a dedicated test lane — account
`self-test` (or LANE_SELF_TEST_ACCOUNT); `main-unlimited` and LANE_ACCOUNT's account are
refused whatever the override (the lane rules it shares with the drill are in refusals.py).
Checks capacity-one serialization, same-request dedupe (including a race), heartbeat, atomic
promotion, receipt replay and the conflicting-receipt 409, prints a pass/fail line per check,
and releases every ticket it made (also on failure). It calls no provider.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from client.api import LaneClient
from client.config import Settings
from client.drill.common import release_each, route_and_account
from client.drill.refusals import (
    Wording,
    lane_refusal,
    refuse_real_account,
    require_shared_url,
)
from client.errors import (
    BadRequestError,
    LaneClientError,
    PreProviderError,
    ReceiptConflictError,
)
from client.models import LaneReply
from coordinator.protocol.errors import LaneError
from coordinator.protocol.names import parse_lane

DEFAULT_SELF_TEST_ROUTE = "self-test"
SELF_TEST_PROJECT = "lane-self-test"
SELF_TEST_LEASE_SECONDS = 60.0  # a crashed run's leftovers clear within a minute
EXIT_OK, EXIT_FAIL, EXIT_PRE_PROVIDER = 0, 1, 3


class SelfTestRefusedError(LaneClientError):
    """Self-test will not run here: production account or LANE_ACCOUNT's account."""

    default_code = "self-test-refused"


class CheckFailed(Exception):
    pass


WORDING = Wording(
    tool="self-test",
    subject="self-test",
    refused=SelfTestRefusedError,
    production_advice="use a dedicated test account (default 'self-test', or "
    "LANE_SELF_TEST_ACCOUNT)",
    lane_account_advice="use a dedicated test account",
    not_shared="coordinator is {kind!r}",
    unenforced="{lane} is unenforced here: its route has no capacity configured",
    not_capacity_one="{lane} has capacity {capacity}; self-test needs 1",
)


def self_test_lane(
    lane: str | None, route: str | None, account: str | None, settings: Settings
) -> str:
    """The test lane; refuses production accounts whatever the override says."""
    default = (DEFAULT_SELF_TEST_ROUTE, settings.self_test_account)
    route_v, acct = route_and_account(lane, route, account, default)
    name = f"{route_v}:{acct}"
    try:
        parse_lane(name)
    except LaneError as exc:
        raise BadRequestError(message=exc.message) from None
    refuse_real_account(acct, settings, WORDING)
    return name


@dataclass(slots=True)
class _Result:
    name: str
    ok: bool
    detail: str


def _expect(cond: bool, detail: str) -> None:
    if not cond:
        raise CheckFailed(detail)


async def run_self_test(
    settings: Settings,
    lane: str,
    *,
    json_out: bool,
    emit: Callable[[str], None],
    warn: Callable[[str], None],
) -> int:
    require_shared_url(settings, WORDING)
    nonce = uuid.uuid4().hex[:12]
    session = aiohttp.ClientSession()
    results: list[_Result] = []
    made: dict[str, LaneClient] = {}  # ticket id -> its owner

    def client(tag: str) -> LaneClient:
        return LaneClient(
            settings.url or "",
            settings.token or "",
            settings.machine_id or "",
            f"self-test-{nonce}-{tag}",
            timeout=settings.timeout,
            required=True,
            session=session,
        )

    try:
        a, b, c = client("a"), client("b"), client("c")
    except PreProviderError:
        await session.close()
        raise
    ids: dict[str, str] = {}
    pre_provider = False

    def keep(r: LaneReply, owner: LaneClient) -> LaneReply:
        if r.owner.claim_id == owner.claim_id and r.ticket_id not in made:
            made[r.ticket_id] = owner
        return r

    async def shared_quiet_lane() -> str:
        st = await a.status(lane)
        refusal = lane_refusal(st, lane, WORDING)
        if refusal is not None:
            raise CheckFailed(refusal)
        _expect(
            not st.held and not st.queued and st.pause is None,
            f"{lane} is not quiet ({len(st.held)} held, {len(st.queued)} queued"
            f"{', paused' if st.pause else ''}); run self-test on an idle test lane",
        )
        return f"{st.coordinator}, {lane} enforced, capacity 1, idle"

    async def serialization() -> str:
        ra = keep(await a.acquire(lane, SELF_TEST_PROJECT, "serial-a", f"{nonce}-a",
                                  SELF_TEST_LEASE_SECONDS), a)  # fmt: skip
        ids["a"] = ra.ticket_id
        _expect(ra.granted and ra.ticket.state == "held", f"first acquire not granted: {ra.state}")
        rb = keep(await b.acquire(lane, SELF_TEST_PROJECT, "serial-b", f"{nonce}-b",
                                  SELF_TEST_LEASE_SECONDS), b)  # fmt: skip
        ids["b"] = rb.ticket_id
        _expect(
            not rb.granted and rb.ticket.state == "queued" and rb.ticket.position == 1,
            f"second request should queue at position 1, got {rb.state} "
            f"position {rb.ticket.position}",
        )
        st = await a.status(lane)
        held = [t.ticket_id for t in st.held]
        _expect(held == [ra.ticket_id], f"status shows held {held}, expected only the first")
        return "first request held, a distinct second request queued at position 1"

    async def dedupe() -> str:
        rc = keep(await c.acquire(lane, SELF_TEST_PROJECT, "serial-b", f"{nonce}-b"), c)
        _expect(rc.duplicate and rc.ticket_id == ids["b"], "same request did not dedupe")
        _expect(not rc.granted, "a non-owner was granted a duplicate")
        _expect(rc.owner.claim_id == b.claim_id, "duplicate does not name the real owner")
        again = keep(await b.acquire(lane, SELF_TEST_PROJECT, "serial-b", f"{nonce}-b"), b)
        _expect(again.ticket_id == ids["b"] and again.duplicate, "owner retry got a new ticket")
        race = await asyncio.gather(
            b.acquire(lane, SELF_TEST_PROJECT, "race", f"{nonce}-race", SELF_TEST_LEASE_SECONDS),
            c.acquire(lane, SELF_TEST_PROJECT, "race", f"{nonce}-race", SELF_TEST_LEASE_SECONDS),
        )
        for r, owner in zip(race, (b, c), strict=True):
            keep(r, owner)
        tids = {r.ticket_id for r in race}
        _expect(len(tids) == 1, f"racing identical acquires made {len(tids)} tickets")
        _expect(sum(not r.duplicate for r in race) == 1, "exactly one racer should create it")
        return "non-owner told the owner and not granted; owner retry and a race converge"

    async def heartbeat() -> str:
        h = await a.heartbeat(lane, ids["a"], SELF_TEST_LEASE_SECONDS)
        _expect(h.refreshed and h.lease_expires_at is not None, f"holder not refreshed: {h.reason}")
        q = await b.heartbeat(lane, ids["b"])
        _expect(not q.refreshed and q.reason == "not-held", f"waiter answer: {q.reason}")
        x = await c.heartbeat(lane, ids["a"])
        _expect(not x.refreshed and x.reason == "not-owner", f"non-owner answer: {x.reason}")
        return "holder refreshed; waiter not-held; another claim not-owner"

    async def promotion() -> str:
        waiter = asyncio.create_task(b.await_ticket(lane, ids["b"], 30))
        await asyncio.sleep(0.05)
        rel = await a.release(lane, ids["a"], "not-submitted", None, "lane self-test")
        _expect(rel.released, f"release refused: {rel.reason}")
        _expect(rel.promoted[:1] == [ids["b"]], f"release promoted {rel.promoted}")
        w = await asyncio.wait_for(waiter, 60)
        _expect(w.granted and w.ticket.state == "held", f"waiter got {w.state}")
        st = await b.status(lane)
        _expect([t.ticket_id for t in st.held] == [ids["b"]], "status disagrees on the holder")
        return "release promoted the waiter in the same step; its await answered granted"

    receipt_ids: dict[str, str] = {}
    payload: dict[str, Any] = {"selfTest": True, "nonce": nonce, "check": "receipt"}

    async def receipt_replay() -> str:
        r1 = await b.receipt(lane, ids["b"], "lease-acquired", payload)
        _expect(r1.stored and r1.http_status == 201, f"first write: stored={r1.stored}")
        _expect(r1.content_hash_verified is True, "coordinator did not verify the hash")
        r2 = await b.receipt(lane, ids["b"], "lease-acquired", payload)
        _expect(not r2.stored and r2.replay, "replay was not idempotent")
        receipt_ids["first"] = r1.receipt_id
        return f"stored (201, hash verified), replay idempotent (200): {r1.receipt_id}"

    async def receipt_conflict() -> str:
        other = {**payload, "check": "conflict"}
        try:
            await b.receipt(lane, ids["b"], "lease-acquired", other,
                            receipt_id=receipt_ids["first"])  # fmt: skip
        except ReceiptConflictError as exc:
            _expect(exc.status == 409, f"conflict answered HTTP {exc.status}")
            return "same receiptId with other content: 409 receipt-conflict"
        raise CheckFailed("same receiptId with other content was accepted")

    checks: list[tuple[str, Callable[[], Awaitable[str]]]] = [
        ("shared coordinator, quiet capacity-1 test lane", shared_quiet_lane),
        ("capacity-one serialization", serialization),
        ("same-request dedupe", dedupe),
        ("heartbeat", heartbeat),
        ("atomic promotion", promotion),
        ("receipt replay", receipt_replay),
        ("conflicting receipt rejected (409)", receipt_conflict),
    ]

    def report(res: _Result) -> None:
        results.append(res)
        if not json_out:
            emit(f"{'PASS' if res.ok else 'FAIL'}  {res.name} — {res.detail}")

    failed = False
    try:
        for name, check in checks:
            if failed:
                report(_Result(name, False, "not run (an earlier check failed)"))
                continue
            try:
                report(_Result(name, True, await check()))
            except CheckFailed as exc:
                failed = True
                report(_Result(name, False, str(exc)))
            except PreProviderError as exc:
                failed = pre_provider = True
                report(_Result(name, False, str(exc)))
            except LaneClientError as exc:
                failed = True
                report(_Result(name, False, str(exc)))
    finally:
        note = "lane self-test cleanup"
        released, problems = await release_each(
            made, lambda tid: made[tid].release(lane, tid, "not-submitted", None, note)
        )
        await session.close()
    cleanup_ok = not problems
    report(
        _Result(
            "release every test ticket",
            cleanup_ok,
            f"{released} of {len(made)} released or already done"
            + (f"; problems: {'; '.join(problems)}" if problems else ""),
        )
    )
    ok = not failed and cleanup_ok
    passed = sum(r.ok for r in results)
    if json_out:
        import json

        emit(
            json.dumps(
                {
                    "lane": lane,
                    "ok": ok,
                    "checks": [{"name": r.name, "ok": r.ok, "detail": r.detail} for r in results],
                    "tickets": sorted(made),
                },
                indent=2,
            )
        )
    else:
        emit(f"self-test on {lane}: {passed}/{len(results)} passed")
    if ok:
        return EXIT_OK
    if pre_provider:
        warn("lane: self-test could not reach a trustworthy shared coordinator")
        return EXIT_PRE_PROVIDER
    return EXIT_FAIL


__all__ = [
    "DEFAULT_SELF_TEST_ROUTE",
    "WORDING",
    "SelfTestRefusedError",
    "run_self_test",
    "self_test_lane",
]
