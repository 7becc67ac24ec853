"""Retries (client/transport.py, docs/client.md#retries) against the REAL coordinator, served
in-process behind a fault layer that fails the next attempts of a route in a planned way:

- "503": answered 503 `unavailable`, nothing applied;
- "drop": the connection is closed before the request is applied;
- "apply-drop": the request is applied (committed), then the connection is closed without its
  reply — the case idempotency is for: the client cannot tell it from "drop";
- "apply-503": applied, then answered 503 (a replica whose commit outcome is unknown);
- "slow-drop": held SLOW_DROP_SECONDS, then closed without applying.

Each test fails with retries disabled (`NO_RETRY`, or `DEFAULT_RETRY` made single-attempt).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
from aiohttp import web

from client.api import NO_RETRY, LaneClient, RetryPolicy
from client.errors import (
    CoordinatorUnreachableError,
    NotFoundError,
    NotHolderError,
    PreProviderError,
    TicketNotHeldError,
    UnavailableError,
)
from client.sync import SyncLaneClient
from client.transport import (
    RETRY_FIRST_DELAY_SECONDS,
    RETRY_JITTER_FRACTION,
    RETRY_MAX_DELAY_SECONDS,
    RETRY_MIN_ATTEMPT_SECONDS,
)
from coordinator.clock import Clock
from coordinator.credentials import Credentials, parse_credentials
from coordinator.http.app import create_app
from coordinator.http.server import LaneRunner
from tests.harness import SOLO, TOKEN, TestManualClock, TestSystemClock, make_config

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
FAULTS = frozenset({"503", "drop", "apply-drop", "apply-503", "slow-drop"})
SLOW_DROP_SECONDS = 2.5
UNAVAILABLE = {"error": {"code": "unavailable", "message": "injected: nothing applied"}}
SLACK_SECONDS = 0.5  # scheduling slack on a busy 2-core machine


class Faulty:
    """The real coordinator behind a fault layer; `fail(path, kinds...)` plans the next
    attempts of `path`, `hits[path]` counts the requests that reached it and `bodies[path]`
    keeps their JSON bodies."""

    def __init__(self, runner: web.AppRunner, url: str, clock: Clock) -> None:
        self.runner, self.url, self.clock = runner, url, clock
        self.plan: dict[str, deque[str]] = {}
        self.hits: Counter[str] = Counter()
        self.bodies: dict[str, list[Any]] = {}

    def fail(self, path: str, *kinds: str) -> None:
        assert set(kinds) <= FAULTS, kinds
        self.plan.setdefault(path, deque()).extend(kinds)

    def client(
        self, machine: str = "studio-a", claim: str | None = "claim-a", **kw: Any
    ) -> LaneClient:
        kw.setdefault("timeout", 5.0)
        return LaneClient(self.url, TOKEN, machine, claim, **kw)

    def layer(self) -> Any:
        @web.middleware
        async def layer(request: web.Request, handler: Handler) -> web.StreamResponse:
            self.hits[request.path] += 1
            if request.method == "POST":
                self.bodies.setdefault(request.path, []).append(json.loads(await request.read()))
            planned = self.plan.get(request.path)
            kind = planned.popleft() if planned else None
            if kind is None:
                return await handler(request)
            if kind == "503":
                return web.json_response(UNAVAILABLE, status=503)
            if kind == "slow-drop":
                await asyncio.sleep(SLOW_DROP_SECONDS)
            if kind in ("drop", "slow-drop"):
                _drop(request)
            await handler(request)  # applied: the reply only comes after the commit
            if kind == "apply-503":
                return web.json_response(UNAVAILABLE, status=503)
            _drop(request)

        return layer


def _drop(request: web.Request) -> NoReturn:
    assert request.transport is not None
    request.transport.close()
    raise ConnectionResetError("injected drop")


async def serve(data_dir: Path, clock: Clock, port: int = 0) -> Faulty:
    config = make_config()
    app = create_app(config, Credentials(parse_credentials(TOKEN, source="test")), data_dir, clock)
    faulty = Faulty(web.AppRunner(app), "", clock)
    app.middlewares.append(faulty.layer())  # innermost: auth still applies
    runner = LaneRunner(app, config)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    faulty.runner, faulty.url = runner, f"http://127.0.0.1:{runner.addresses[0][1]}"
    return faulty


@pytest.fixture
async def coord(tmp_path: Path) -> AsyncIterator[Faulty]:
    """The faulty coordinator with a ManualClock (time moves only when told)."""
    c = await serve(tmp_path / "data", TestManualClock())
    yield c
    await c.runner.cleanup()


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[Faulty]:
    """The faulty coordinator on the system clock (real long polls)."""
    c = await serve(tmp_path / "data", TestSystemClock())
    yield c
    await c.runner.cleanup()


P_ACQUIRE, P_RELEASE, P_RECEIPT = "/v1/lanes/acquire", "/v1/lanes/release", "/v1/lanes/receipt"
P_STATUS, P_HEARTBEAT = "/v1/lanes/status", "/v1/lanes/heartbeat"


# ---------------------------------------------------------------- a lost reply, then a repeat


@pytest.mark.parametrize("fault", ["apply-drop", "apply-503"])
@pytest.mark.parametrize("busy", [False, True], ids=["granted", "queued"])
async def test_acquire_applied_then_lost_returns_the_same_ticket(
    coord: Faulty, fault: str, busy: bool
) -> None:
    async with coord.client(required=True) as a, coord.client("studio-b", "claim-b") as b:
        other = (await b.acquire(SOLO, "p", "other", "h")).ticket_id if busy else None
        coord.fail(P_ACQUIRE, fault)
        r = await a.acquire(SOLO, "p", "s1", "h1")
        assert coord.hits[P_ACQUIRE] == (3 if busy else 2)
        assert r.duplicate  # the repeat found the ticket its first attempt made
        assert r.granted is not busy and r.owner.claim_id == "claim-a"
        st = await a.status(SOLO)
        mine = [t.ticket_id for t in [*st.held, *st.queued] if t.claim_id == "claim-a"]
        assert mine == [r.ticket_id]  # one ticket, not two
        assert [t.ticket_id for t in st.held] == [other if busy else r.ticket_id]


@pytest.mark.parametrize("fault", ["apply-drop", "apply-503"])
async def test_release_applied_then_lost_reads_as_released(coord: Faulty, fault: str) -> None:
    async with coord.client(required=True) as a, coord.client("studio-b", "claim-b") as b:
        ra = await a.acquire(SOLO, "p", "s1", "h1")
        rb = await b.acquire(SOLO, "p", "s2", "h2")
        coord.fail(P_RELEASE, fault)
        rel = await a.release(SOLO, ra.ticket_id, "completed", "job-1")
        assert coord.hits[P_RELEASE] == 2
        assert rel.released and rel.reason is None
        assert (rel.state, rel.outcome) == ("done", "completed")
        assert rel.promoted == []  # the promotion was in the lost reply
        st = await a.status(SOLO)
        assert [t.ticket_id for t in st.held] == [rb.ticket_id]  # promoted once, by attempt 1
        h = await a.history(SOLO)
        assert [(e.ticket_id, e.outcome) for e in h.entries] == [(ra.ticket_id, "completed")]


async def test_a_repeat_that_finds_another_outcome_stays_already_done(coord: Faulty) -> None:
    async with coord.client() as a:
        r = await a.acquire(SOLO, "p", "s1", "h1")
        hand = a.with_claim(None)  # `lane release --ticket` from the same computer
        assert (await hand.release(SOLO, r.ticket_id, "failed")).released
        coord.fail(P_RELEASE, "drop")
        rel = await a.release(SOLO, r.ticket_id, "completed")
        assert coord.hits[P_RELEASE] == 3
        assert (rel.released, rel.reason, rel.outcome) == (False, "already-done", "failed")


async def test_receipt_applied_then_lost_is_stored_once(coord: Faulty) -> None:
    async with coord.client() as a:
        r = await a.acquire(SOLO, "p", "s1", "h1")
        coord.fail(P_RECEIPT, "apply-drop")
        rc = await a.receipt(SOLO, r.ticket_id, "lease-acquired", {"fence": 1})
        sent = [body["receiptId"] for body in coord.bodies[P_RECEIPT]]
        assert sent == [rc.receipt_id, rc.receipt_id]  # the client's own id, both attempts
        assert rc.receipt_id.startswith(f"{r.ticket_id}:lease-acquired:")
        assert (rc.http_status, rc.stored, rc.replay) == (200, False, True)
        st = await a.status(SOLO, include_receipts=True)
        assert st.recent_receipts is not None
        assert [x.receipt_id for x in st.recent_receipts] == [rc.receipt_id]


async def test_heartbeat_cooldown_and_await_repeat_after_a_lost_reply(coord: Faulty) -> None:
    async with coord.client(required=True) as a:
        r = await a.acquire(SOLO, "p", "s1", "h1")
        for op in ("heartbeat", "cooldown", "await"):
            coord.fail(f"/v1/lanes/{op}", "apply-drop")
        hb = await a.heartbeat(SOLO, r.ticket_id)
        assert hb.refreshed and hb.fence == r.ticket.fence
        now = coord.clock.now()
        cd = await a.cooldown(SOLO, r.ticket_id, 60)
        # same instant on the manual clock: the repeat neither extends nor trims the pause
        assert cd.paused and cd.pause is not None and cd.pause.until == now + 60
        aw = await a.await_ticket(SOLO, r.ticket_id, wait_seconds=5)
        assert aw.granted and aw.ticket_id == r.ticket_id
        for op in ("heartbeat", "cooldown", "await"):
            assert coord.hits[f"/v1/lanes/{op}"] == 2, op


async def test_reads_are_retried_after_503_and_drops(coord: Faulty) -> None:
    async with coord.client(required=True) as a:
        await a.acquire(SOLO, "p", "s1", "h1")
        coord.fail(P_STATUS, "503", "drop", "503")
        coord.fail("/v1/lanes/history", "drop")
        coord.fail("/v1/lanes", "503", "drop")
        coord.fail("/v1/machines", "503")
        assert len((await a.status(SOLO)).held) == 1
        assert (await a.history(SOLO)).entries == []
        assert SOLO in {x.lane for x in (await a.lanes()).lanes}
        assert "studio-a" in {m.machine_id for m in (await a.machines()).machines}
        assert (coord.hits[P_STATUS], coord.hits["/v1/lanes/history"]) == (4, 2)
        assert (coord.hits["/v1/lanes"], coord.hits["/v1/machines"]) == (3, 2)


# ---------------------------------------------------------------- what is not retried


async def test_a_4xx_is_never_retried(coord: Faulty) -> None:
    async with coord.client() as a, coord.client("studio-b", "claim-b") as b:
        held = await a.acquire(SOLO, "p", "s1", "h1")
        queued = await b.acquire(SOLO, "p", "s2", "h2")
        with pytest.raises(NotFoundError):
            await a.heartbeat(SOLO, "t_unknown")
        with pytest.raises(TicketNotHeldError):
            await b.cooldown(SOLO, queued.ticket_id, 60)
        with pytest.raises(NotHolderError):
            await b.receipt(SOLO, held.ticket_id, "lease-acquired", {"x": 1})
        assert [coord.hits[p] for p in (P_HEARTBEAT, "/v1/lanes/cooldown", P_RECEIPT)] == [1, 1, 1]


async def test_no_retry_sends_one_attempt(coord: Faulty) -> None:
    async with coord.client(retry=NO_RETRY) as a:
        coord.fail(P_STATUS, "503")
        with pytest.raises(UnavailableError):
            await a.status(SOLO)
        assert coord.hits[P_STATUS] == 1
        assert a.with_claim("other").retry is NO_RETRY
    sync = SyncLaneClient(coord.url, TOKEN, "studio-a", retry=NO_RETRY)
    try:
        assert isinstance(sync.backend, LaneClient) and sync.backend.retry is NO_RETRY
    finally:
        sync.close()


# ---------------------------------------------------------------- the timeout bounds the retries


async def test_retries_stop_at_the_timeout_then_fail_closed(coord: Faulty) -> None:
    timeout = 1.0
    coord.fail(P_STATUS, *["503"] * 1000)
    async with coord.client(timeout=timeout) as loose:
        started = time.monotonic()
        with pytest.raises(UnavailableError) as ei:
            await loose.status(SOLO)
        took = time.monotonic() - started
        assert timeout - RETRY_MIN_ATTEMPT_SECONDS - 0.1 <= took <= timeout + SLACK_SECONDS
        assert coord.hits[P_STATUS] >= 4 and "attempts in" in ei.value.message
    async with coord.client(timeout=timeout, required=True) as strict:
        with pytest.raises(PreProviderError) as pe:
            await strict.status(SOLO)
        assert pe.value.cause.startswith("coordinator at ")
        assert "answered HTTP 503 unavailable" in pe.value.cause
        assert isinstance(pe.value.underlying, UnavailableError)


async def test_a_dropped_connection_fails_closed_after_the_retries(coord: Faulty) -> None:
    coord.fail(P_ACQUIRE, *["drop"] * 1000)
    async with coord.client(timeout=1.0, required=True) as a:
        with pytest.raises(PreProviderError) as pe:
            await a.acquire(SOLO, "p", "s1", "h1")
        assert pe.value.cause.startswith("unreachable: ServerDisconnectedError talking to")
        assert isinstance(pe.value.underlying, CoordinatorUnreachableError)
        assert coord.hits[P_ACQUIRE] >= 4
        st = await a.status(SOLO)
        assert st.held == [] and st.queued == []  # nothing was applied


async def test_a_refused_connection_is_retried_until_the_timeout(refused_port: int) -> None:
    url = f"http://127.0.0.1:{refused_port}"
    async with LaneClient(url, TOKEN, "studio-a", timeout=1.0, required=True) as a:
        started = time.monotonic()
        with pytest.raises(PreProviderError) as pe:
            await a.status(SOLO)
        took = time.monotonic() - started
        assert 0.9 - RETRY_MIN_ATTEMPT_SECONDS <= took <= 1.0 + SLACK_SECONDS, took
        assert pe.value.cause.startswith("unreachable: cannot connect to")
        assert isinstance(pe.value.underlying, CoordinatorUnreachableError)


async def test_a_refused_connection_succeeds_once_the_coordinator_is_back(
    tmp_path: Path, refused_port: int
) -> None:
    async def come_back() -> Faulty:
        await asyncio.sleep(0.5)
        return await serve(tmp_path / "data", TestManualClock(), port=refused_port)

    back = asyncio.create_task(come_back())
    try:
        async with LaneClient(
            f"http://127.0.0.1:{refused_port}", TOKEN, "studio-a", "claim-a", timeout=5.0
        ) as a:
            r = await a.acquire(SOLO, "p", "s1", "h1")
            assert r.granted and not r.duplicate
    finally:
        await (await back).runner.cleanup()


async def test_a_retried_long_poll_asks_for_what_fits_its_timeout(live: Faulty) -> None:
    """await's own timeout is waitSeconds + timeout (3 + 2 = 5 s). The first attempt is held
    2.5 s, then dropped: repeating waitSeconds=3 would end after 5.5 s, so the retry asks for
    the 1 s that fits and is answered within the call's timeout."""
    async with live.client(timeout=2.0) as a, live.client("studio-b", "claim-b") as b:
        await b.acquire(SOLO, "p", "holder", "h")
        r = await a.acquire(SOLO, "p", "waiter", "h")
        live.fail("/v1/lanes/await", "slow-drop")
        started = time.monotonic()
        aw = await a.await_ticket(SOLO, r.ticket_id, wait_seconds=3)
        took = time.monotonic() - started
        assert aw.ticket.state == "queued" and not aw.granted
        assert SLOW_DROP_SECONDS + 1.0 <= took <= 5.0, took
        waits = [body["waitSeconds"] for body in live.bodies["/v1/lanes/await"]]
        assert waits == [3, 1]


# ---------------------------------------------------------------- the backoff


def test_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    policy = RetryPolicy()
    for retry in range(1, 12):
        full = min(RETRY_MAX_DELAY_SECONDS, RETRY_FIRST_DELAY_SECONDS * 2 ** (retry - 1))
        delays = {policy.delay(retry) for _ in range(50)}
        assert all(full * (1 - RETRY_JITTER_FRACTION) <= d <= full for d in delays), retry
        assert len(delays) > 1  # jitter: retrying clients do not move in step
    assert RetryPolicy().delay(10_000) <= RETRY_MAX_DELAY_SECONDS
    assert NO_RETRY.allows(1) is False and RetryPolicy().allows(1_000) is True
