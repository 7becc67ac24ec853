"""Drill steps 1-4 and 3b (docs/protocol.md#acceptance-drill), each a function of one role returning
its StepResult:

1. A acquires `shared-queue-drill-a` → granted.
2. B acquires `shared-queue-drill-b` → queued at position 1.
3. A and B acquire `shared-queue-race` at an agreed instant → one canonical ticket on both
   sides; (3b, run after step 5) once it is held only its owner is granted, the other is
   told who owns it.
4. A releases its exact ticket → B's request is held; B learns it from a parked long poll.
"""

from __future__ import annotations

import asyncio

from client.clock import monotonic
from client.drill.common import (
    DRILL_LEASE_SECONDS,
    RACE_LEAD_SECONDS,
    StepResult,
    expect,
    ms,
)
from client.drill.role import DrillRole


async def step1(drill: DrillRole) -> StepResult:
    if drill.role == "a":
        r, took = await drill.timed_acquire("shared-queue-drill-a")
        expect(
            r.granted and r.ticket.state == "held",
            f"expected granted+held, got granted={r.granted} state={r.ticket.state} "
            f"(ticket {r.ticket_id})",
        )
        drill.ids["a"] = r.ticket_id
        drill.numbers["fence_a"] = float(r.ticket.fence or 0)
        await drill.barrier.signal("s1", f"{r.ticket_id}|{r.ticket.fence}")
        return StepResult(
            "1",
            True,
            f"ticket {r.ticket_id} granted, fence {r.ticket.fence} ({ms(took)})",
            {"ticketId": r.ticket_id, "fence": r.ticket.fence, "ms": took * 1000},
        )
    sig = await drill.barrier.wait("s1", "finish step 1")
    tid, fence = sig.data.split("|")
    drill.ids["a"], drill.numbers["fence_a"] = tid, float(fence)
    st = await drill.client.status(drill.lane)
    held = [(t.ticket_id, t.machine_id) for t in st.held]
    expect(
        held == [(tid, drill.partner_machine)],
        f"status shows held {held}, expected only A's {tid} by {drill.partner_machine}",
    )
    return StepResult(
        "1", True, f"status shows A's {tid} held by {drill.partner_machine} (fence {fence})",
        {"ticketId": tid},
    )  # fmt: skip


async def step2(drill: DrillRole) -> StepResult:
    if drill.role == "b":
        r, took = await drill.timed_acquire("shared-queue-drill-b")
        expect(
            not r.granted and r.ticket.state == "queued" and r.ticket.position == 1,
            f"expected queued at position 1, got state={r.ticket.state} "
            f"position={r.ticket.position} granted={r.granted} (ticket {r.ticket_id})",
        )
        drill.ids["b"] = r.ticket_id
        await drill.barrier.signal("s2", r.ticket_id)
        return StepResult(
            "2",
            True,
            f"ticket {r.ticket_id} queued at position 1, eta "
            f"{r.ticket.eta_seconds or 0:.0f} s ({ms(took)})",
            {"ticketId": r.ticket_id, "ms": took * 1000},
        )
    sig = await drill.barrier.wait("s2", "finish step 2")
    tid = sig.data
    drill.ids["b"] = tid
    st = await drill.client.status(drill.lane)
    queued = [(t.ticket_id, t.position) for t in st.queued]
    expect(queued == [(tid, 1)], f"status shows queued {queued}, expected [({tid}, 1)]")
    return StepResult("2", True, f"status shows B's {tid} queued at position 1",
                      {"ticketId": tid})  # fmt: skip


async def step3(drill: DrillRole) -> StepResult:
    if drill.role == "a":
        go = drill.coord_now() + RACE_LEAD_SECONDS
        await drill.barrier.signal("s3go", f"{go:.3f}")
    else:
        go = float((await drill.barrier.wait("s3go", "announce the race instant")).data)
    await asyncio.sleep(max(0.0, go - drill.coord_now()))
    sent = drill.coord_now()
    r, took = await drill.timed_acquire("shared-queue-race")
    mine_owner = r.owner.machine_id == drill.client.machine_id and (
        r.owner.claim_id == drill.client.claim_id
    )
    await drill.barrier.signal(
        "s3", f"{r.ticket_id}|{int(r.duplicate)}|{int(r.granted)}|{(sent - go) * 1000:.0f}"
    )
    sig = await drill.barrier.wait("s3", "finish the race")
    o_tid, o_dup, o_granted, o_skew = sig.data.split("|")
    drill.ids["race"] = r.ticket_id
    drill.numbers["race_owner_is_me"] = float(mine_owner)
    expect(
        o_tid == r.ticket_id,
        f"two tickets for one request: this role got {r.ticket_id}, the partner {o_tid}",
    )
    creators = int(not r.duplicate) + int(o_dup == "0")
    expect(creators == 1, f"{creators} racers created the ticket; exactly one must")
    expect(
        not r.granted and o_granted == "0",
        "a racer was granted while the lane is held by A's first ticket",
    )
    if mine_owner:
        expect(not r.duplicate, "this role owns the race ticket but was told duplicate")
    else:
        expect(
            r.duplicate
            and r.owner.machine_id == drill.partner_machine
            and r.owner.claim_id == drill.partner_claim,
            f"non-owner reply: duplicate={r.duplicate}, owner {r.owner.machine_id}/"
            f"{r.owner.claim_id}, expected the partner {drill.partner_machine}",
        )
    owner = drill.client.machine_id if mine_owner else drill.partner_machine
    return StepResult(
        "3",
        True,
        f"one canonical ticket {r.ticket_id} on both sides, owner {owner}; this role "
        f"{'created it' if not r.duplicate else 'got duplicate=true, granted=false'} "
        f"(sent at race instant +{(sent - go) * 1000:.0f} ms, partner +{o_skew} ms; "
        f"{ms(took)})",
        {"ticketId": r.ticket_id, "owner": owner, "duplicate": r.duplicate},
    )


async def step4(drill: DrillRole) -> StepResult:
    if drill.role == "b":
        tid = drill.ids["b"]
        t0 = monotonic()
        waiter = asyncio.create_task(drill.await_until_not_queued(tid, drill.timeout))
        await asyncio.sleep(0.2)  # parked before A is told to release
        await drill.barrier.signal("s4ready")
        try:
            r, calls = await waiter
        finally:
            waiter.cancel()
        answered = drill.coord_now()
        parked = monotonic() - t0
        expect(
            r.granted and r.ticket.state == "held",
            f"await ended with state={r.ticket.state} granted={r.granted} after {parked:.1f} s",
        )
        expect_fence = int(drill.numbers["fence_a"]) + 1
        expect(
            r.ticket.fence == expect_fence,
            f"fence {r.ticket.fence}, expected {expect_fence} (A's fence + 1)",
        )
        lat = answered - (r.ticket.held_at or answered)
        await drill.barrier.signal("s4done", f"{lat * 1000:.0f}|{r.ticket.fence}")
        drill.keep[(drill.lane, tid)] = DRILL_LEASE_SECONDS
        return StepResult(
            "4",
            True,
            f"B's {tid} held, fence {r.ticket.fence}: the parked await answered "
            f"{ms(lat)} after the grant (parked {parked:.1f} s, {calls} call)",
            {"ticketId": tid, "awaitAnsweredMs": lat * 1000, "parkedSeconds": parked},
        )
    await drill.barrier.wait("s4ready", "park its await")
    tid = drill.ids["a"]
    t0 = monotonic()
    rel = await drill.release(tid)
    took = monotonic() - t0
    expect(rel.released, f"release of {tid} refused: {rel.reason}")
    expect(
        rel.promoted[:1] == [drill.ids["b"]],
        f"release promoted {rel.promoted}, expected B's {drill.ids['b']}",
    )
    sig = await drill.barrier.wait("s4done", "see its grant")
    lat_ms, fence = sig.data.split("|")
    return StepResult(
        "4",
        True,
        f"released {tid} ({ms(took)}), promoted {rel.promoted[0]} in the same step; "
        f"B's parked await answered {lat_ms} ms after the grant (fence {fence})",
        {"ticketId": tid, "promoted": rel.promoted, "releaseMs": took * 1000},
    )


async def step3b(drill: DrillRole) -> StepResult:
    race = drill.ids["race"]
    if drill.role == "b":
        rel = await drill.release_expected(drill.ids["b"], drill.ids["b"])
        expect(rel.promoted == [race], f"release promoted {rel.promoted}, expected [{race}]")
        await drill.barrier.signal("s3b-open", race)
    else:
        await drill.barrier.wait("s3b-open", "release its ticket")
    if drill.numbers["race_owner_is_me"]:
        r = await drill.client.await_ticket(drill.lane, race, 30)
        expect(
            r.granted and r.ticket.state == "held",
            f"owner's await: state={r.ticket.state} granted={r.granted}",
        )
        await drill.barrier.signal("s3b", f"owner-granted|{r.ticket.fence}")
        sig = await drill.barrier.wait("s3b", "re-acquire the race ticket")
        await drill.release_expected(race, "the race ticket")
        await drill.barrier.signal("s3b-done")
        return StepResult(
            "3b",
            True,
            f"{race} held: owner {drill.client.machine_id} granted on await (fence "
            f"{r.ticket.fence}); partner's re-acquire: {sig.data}; released",
            {"ticketId": race},
        )
    r = await drill.acquire("shared-queue-race", DRILL_LEASE_SECONDS)
    expect(
        r.ticket_id == race and r.duplicate and not r.granted and r.ticket.state == "held",
        f"non-owner re-acquire: ticket {r.ticket_id} duplicate={r.duplicate} "
        f"granted={r.granted} state={r.ticket.state}",
    )
    expect(
        r.owner.machine_id == drill.partner_machine and r.owner.claim_id == drill.partner_claim,
        f"owner named {r.owner.machine_id}/{r.owner.claim_id}, expected the partner",
    )
    await drill.barrier.signal("s3b", "granted=false,owner=partner")
    sig = await drill.barrier.wait("s3b", "be granted the race ticket")
    await drill.barrier.wait("s3b-done", "release the race ticket")
    return StepResult(
        "3b",
        True,
        f"{race} held by {drill.partner_machine}: this role's re-acquire → duplicate, "
        f"granted=false, owner {r.owner.machine_id}; owner's await: {sig.data.split('|')[0]}",
        {"ticketId": race},
    )


__all__ = ["step1", "step2", "step3", "step3b", "step4"]
