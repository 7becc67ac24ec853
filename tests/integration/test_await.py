"""docs/protocol.md#await: the long poll, over HTTP against the real server."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from tests.integration.kit import DUO, SOLO, acquire_body, assert_error, ticket_body

if TYPE_CHECKING:
    from tests.harness import Reply, Running


async def _held_and_queued(server: Running, lane: str = SOLO, **lease: Any) -> tuple[str, str]:
    a = await server.ok("acquire", acquire_body(lane=lane, **lease))
    b = await server.ok("acquire", acquire_body(lane=lane, machine="mB", claim="cB", prompt="h2"))
    assert a["granted"] and b["ticket"]["state"] == "queued"
    return a["ticket"]["ticketId"], b["ticket"]["ticketId"]


async def _parked_await(
    server: Running, lane: str, ticket_id: str, wait: float = 30, slack: float = 0.0
) -> asyncio.Task[Reply]:
    """Start B's await; return once it is parked (its timer sleeps until ~now + wait)."""
    deadline = server.clock.now() + wait
    task = asyncio.create_task(
        server.op("await", ticket_body(lane, ticket_id, "mB", "cB", waitSeconds=wait))
    )
    await server.clock.until_sleeping(deadline, slack=slack)
    await asyncio.sleep(0.05)
    assert not task.done(), "await answered although nothing changed"
    return task


async def test_await_returns_on_grant(server: Running) -> None:
    a, b = await _held_and_queued(server)
    task = await _parked_await(server, SOLO, b)
    rel = await server.ok("release", ticket_body(SOLO, a, outcome="completed"))
    assert rel["promoted"] == [b]
    r = await asyncio.wait_for(task, 10)
    assert r.status == 200
    assert set(r.body) == {
        "coordinator",
        "lane",
        "enforced",
        "ticket",
        "granted",
        "duplicate",
        "owner",
        "pause",
    }
    assert r["coordinator"] == "actor-sqlite"
    assert r["ticket"]["ticketId"] == b and r["ticket"]["state"] == "held"
    assert r["granted"] is True and r["duplicate"] is False
    assert r["owner"] == {"machineId": "mB", "claimId": "cB"}


async def test_await_on_a_held_ticket_answers_at_once(server: Running) -> None:
    a, _ = await _held_and_queued(server)
    r = await server.ok("await", ticket_body(SOLO, a, waitSeconds=60))
    assert r["granted"] is True and r["ticket"]["state"] == "held"


async def test_await_returns_when_a_pause_starts(server: Running) -> None:
    a, b = await _held_and_queued(server)
    task = await _parked_await(server, SOLO, b)
    cd = await server.ok(
        "cooldown", ticket_body(SOLO, a, reasonCode="provider-human-check", retryAfterSeconds=120)
    )
    r = await asyncio.wait_for(task, 10)
    assert r.status == 200 and r["ticket"]["state"] == "queued" and r["granted"] is False
    assert r["pause"] == cd["pause"]
    assert r["ticket"]["etaSeconds"] >= 120


async def test_await_returns_when_a_pause_ends(server: Running) -> None:
    a, b = await _held_and_queued(server)
    await server.ok(
        "cooldown", ticket_body(SOLO, a, reasonCode="provider-human-check", retryAfterSeconds=30)
    )
    task = await _parked_await(server, SOLO, b, wait=60)
    server.clock.advance(30)
    r = await asyncio.wait_for(task, 10)
    assert r.status == 200
    assert r["pause"] is None
    assert r["ticket"]["state"] == "queued"  # A still holds the only slot


async def test_await_returns_after_wait_seconds(server: Running) -> None:
    _, b = await _held_and_queued(server)
    task = await _parked_await(server, SOLO, b, wait=5)
    server.clock.advance(4.9)
    await asyncio.sleep(0.1)
    assert not task.done()
    server.clock.advance(0.1)
    r = await asyncio.wait_for(task, 10)
    assert r.status == 200 and r["ticket"]["state"] == "queued" and r["granted"] is False
    assert r["ticket"]["position"] == 1


async def test_await_wait_seconds_bounds(server: Running) -> None:
    _, b = await _held_and_queued(server)
    for bad in (0, 0.5, 61, -3, "5", None):
        r = await server.op("await", ticket_body(SOLO, b, "mB", "cB", waitSeconds=bad))
        assert_error(r, 400, "bad-request", "waitSeconds")


async def test_await_counts_as_keep_alive(server: Running) -> None:
    timeout = server.config.waiter_timeout_seconds  # 600
    _, b = await _held_and_queued(server, leaseSeconds=3600)
    server.clock.advance(timeout - 100)
    task = await _parked_await(server, SOLO, b, wait=1)
    server.clock.advance(1)
    assert (await asyncio.wait_for(task, 10)).status == 200
    last_call = server.clock.now()
    # past the enqueue-based deadline, but within timeout of the await: still queued
    server.clock.advance(200)
    status = await server.ok("status", {"lane": SOLO})
    assert [t["ticketId"] for t in status["queued"]] == [b]
    # no more calls: the alarm ends it as abandoned
    server.clock.advance(timeout)
    status = await server.ok("status", {"lane": SOLO})
    assert status["queued"] == []
    hist = await server.ok("history", {"lane": SOLO})
    [row] = [e for e in hist["entries"] if e["ticketId"] == b]
    assert row["outcome"] == "abandoned"
    assert row["endedAt"] == last_call + timeout


async def test_await_by_non_owner_is_403(server: Running) -> None:
    _, b = await _held_and_queued(server)
    assert_error(await server.op("await", ticket_body(SOLO, b, "mC", "cC")), 403, "not-owner")
    # same machine, another claim
    assert_error(await server.op("await", ticket_body(SOLO, b, "mB", "cX")), 403, "not-owner")


async def test_await_without_claim_from_the_owner_machine_is_allowed(server: Running) -> None:
    a, _ = await _held_and_queued(server)
    r = await server.ok("await", ticket_body(SOLO, a, "mA", None, waitSeconds=1))
    assert r["ticket"]["state"] == "held"


async def test_await_unknown_ticket_is_404(server: Running) -> None:
    await _held_and_queued(server)
    assert_error(await server.op("await", ticket_body(SOLO, "t_nope")), 404, "not-found")
    # a lane that has never been used
    assert_error(await server.op("await", ticket_body(DUO, "t_nope")), 404, "not-found")
    # an unlimited ticket id on an enforced lane
    r = await server.op("await", ticket_body(SOLO, "unlimited-0b5c3c4e"))
    assert_error(r, 404, "not-found")


async def test_await_on_an_ended_ticket_answers_at_once(server: Running) -> None:
    a, _ = await _held_and_queued(server)
    await server.ok("release", ticket_body(SOLO, a, outcome="completed"))
    r = await server.ok("await", ticket_body(SOLO, a, waitSeconds=60))
    assert r["ticket"]["state"] == "done" and r["granted"] is False


async def test_await_wakes_within_milliseconds_of_a_release(real_server: Running) -> None:
    """Real clock: the waiter learns of its grant right after the release (bound is generous)."""
    server = real_server
    a, b = await _held_and_queued(server)
    samples = []
    for i in range(3):
        task = await _parked_await(server, SOLO, b, wait=30, slack=5)
        started = time.perf_counter()
        rel = await server.ok("release", ticket_body(SOLO, a, outcome="completed"))
        r = await asyncio.wait_for(task, 10)
        samples.append(time.perf_counter() - started)
        assert rel["promoted"] == [b]
        assert r["granted"] is True and r["ticket"]["ticketId"] == b
        # set up the next round: A queues behind B, B releases, A holds, B queues again
        nxt = await server.ok("acquire", acquire_body(prompt=f"next{i}"))
        await server.ok("release", ticket_body(SOLO, b, "mB", "cB", outcome="completed"))
        a = nxt["ticket"]["ticketId"]
        q = await server.ok("acquire", acquire_body(machine="mB", claim="cB", prompt=f"b{i}"))
        b = q["ticket"]["ticketId"]
    worst = max(samples)
    print(f"\nawait wake after release: {[round(s * 1000, 1) for s in samples]} ms")
    assert worst < 1.0, samples
