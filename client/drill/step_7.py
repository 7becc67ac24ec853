"""Drill step 7, the in-flight hold (docs/protocol.md#acceptance-drill, docs/protocol.md#in-flight):
the slot outlives the lease while the provider may still run the job.

A acquires `shared-queue-drill-inflight` on a 15 s lease, records `provider-submitted` on it (a
simulated job: no provider is called) and never heartbeats it — a driver that crashed after its
submit. B queues `shared-queue-drill-inflight-waiter` and watches it through parked awaits. The
alarm reaps A's lease at its expiry, but the lane keeps A's slot for the job (status `inFlight`
lists it until submittedAt + in_flight_hold_seconds), so B is NOT promoted: B watches for
IN_FLIGHT_WATCH_SECONDS after the expiry, A reads the hold in status. Then A records
`provider-terminal` on its ended ticket (what a resumed driver writes when its poll sees the job
end): the hold ends and B is granted in that same commit, its parked await answering at once.

Each role prints how long B stayed queued after the expiry and how soon the receipt promoted it.
A coordinator that keeps no hold for the lane (in_flight_hold_seconds = 0, or shorter than the
lease) fails the step on both roles with a message that says so.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from client.clock import monotonic
from client.drill.common import (
    DRILL_LEASE_SECONDS,
    DRILL_PROJECT,
    IN_FLIGHT_WATCH_SECONDS,
    MAX_PROMOTION_LATENESS,
    POLL_INTERVAL,
    SHORT_LEASE_SECONDS,
    DrillFailed,
    StepResult,
    expect,
    ms,
)
from client.drill.role import DrillRole
from client.models import HistoryEntry, InFlightJob

JOB_SCENE = "shared-queue-drill-inflight"
WAITER_SCENE = "shared-queue-drill-inflight-waiter"
CLOCK_SLACK = 0.5  # seconds: a role's estimate of the coordinator's clock may be off this much
SAME_COMMIT = 0.001  # seconds: times of one commit, after a JSON round trip


def job_payload(drill: DrillRole, phase: str) -> dict[str, Any]:
    """The simulated job's receipt payload: ids only (docs/protocol.md#driver-rules)."""
    payload: dict[str, Any] = {
        "drill": DRILL_PROJECT,
        "run": drill.run_id,
        "step": 7,
        "providerJobId": f"drill-job-{drill.run_id}",
    }
    if phase == "provider-terminal":
        payload["status"] = "completed"
    return payload


def holds_off(lane: str) -> str:
    """What to change when the coordinator keeps no in-flight hold on the drill lane."""
    route = lane.split(":", 1)[0]
    return (
        f"in-flight holds are off for {lane} on this coordinator (or shorter than the drill's "
        f"{SHORT_LEASE_SECONDS:g} s lease): step 7 needs in_flight_hold_seconds > 0 — set it "
        f'under [routes."{route}"] (or the lane) in the coordinator config and restart it '
        "(the default is 1800; 0 turns holds off)"
    )


async def step7(drill: DrillRole) -> StepResult:
    if drill.role == "b":
        return await _step7_b(drill)
    r = await drill.acquire(JOB_SCENE, SHORT_LEASE_SECONDS)
    expect(
        r.granted and r.ticket.state == "held" and r.ticket.lease_expires_at is not None,
        f"short lease not granted: state={r.ticket.state} granted={r.granted}",
    )
    tid, expiry = r.ticket_id, r.ticket.lease_expires_at or 0.0
    sub = await drill.client.receipt(
        drill.lane, tid, "provider-submitted", job_payload(drill, "provider-submitted")
    )
    expect(
        sub.stored and sub.http_status == 201,
        f"provider-submitted: HTTP {sub.http_status} stored={sub.stored}",
    )
    await drill.barrier.signal("s7", f"{tid}|{expiry:.6f}")
    # From here on nobody heartbeats `tid`: its lease runs out as a crashed driver's would.
    await drill.barrier.wait("s7parked", "queue its waiter")
    hold = await _hold_after_expiry(drill, tid, expiry, r.ticket.fence)
    hold_s = hold.hold_until - hold.submitted_at
    watch = drill.timeout + SHORT_LEASE_SECONDS + IN_FLIGHT_WATCH_SECONDS
    stayed = float((await drill.barrier.wait("s7blocked", "watch its waiter", watch)).data)

    sent = drill.coord_now()
    t0 = monotonic()
    term = await drill.client.receipt(
        drill.lane, tid, "provider-terminal", job_payload(drill, "provider-terminal")
    )
    took = monotonic() - t0
    answered = drill.coord_now()
    expect(
        term.stored and term.http_status == 201,
        f"provider-terminal: HTTP {term.http_status} stored={term.stored}",
    )
    done = await drill.barrier.wait("s7done", "be promoted")
    w_tid, held, wake_ms, fence = done.data.split("|")
    held_at = float(held)
    expect(
        sent - CLOCK_SLACK <= held_at <= answered + CLOCK_SLACK,
        f"B's {w_tid} was granted {held_at - sent:+.3f} s after the provider-terminal receipt "
        f"was sent (answered after {took:.3f} s): not by that receipt",
    )
    st = await drill.client.status(drill.lane, include_receipts=True)
    expect(
        all(j.ticket_id != tid for j in st.in_flight),
        f"{tid} is still listed in inFlight after its provider-terminal receipt",
    )
    rows = [
        x
        for x in (st.recent_receipts or [])
        if x.ticket_id == tid and x.phase == "provider-terminal"
    ]
    expect(len(rows) == 1, f"status shows {len(rows)} provider-terminal receipts for {tid}")
    expect(
        abs(rows[0].created_at - held_at) <= SAME_COMMIT,
        f"B's grant at {held_at:.3f} is not the receipt's commit ({rows[0].created_at:.3f})",
    )
    e = await drill.history_entry(tid)
    expect(
        e is not None
        and e.outcome == "expired"
        and e.in_flight_until == hold.hold_until
        and e.in_flight_ended == "receipt",
        f"render log of {tid}: {_row(e)}; expected outcome expired, inFlightUntil "
        f"{hold.hold_until}, inFlightEnded receipt",
    )
    inc = await drill.client.incidents(drill.lane, 50)
    kinds = {i.kind for i in inc.incidents if i.ticket_id == tid}
    expect(
        {"in-flight-held", "in-flight-ended"} <= kinds,
        f"incidents of {tid}: {sorted(kinds)}; expected in-flight-held and in-flight-ended",
    )
    return StepResult(
        "7",
        True,
        f"{tid} (lease {SHORT_LEASE_SECONDS:g} s, provider-submitted, never heartbeated) "
        f"expired → in-flight hold until submittedAt + {hold_s:.0f} s (status inFlight, "
        f"incident in-flight-held); B's {w_tid} not promoted for {stayed:.1f} s after A's lease "
        f"expired; provider-terminal ended the hold (inFlightEnded receipt) and promoted it in "
        f"the receipt's own commit, within the {ms(took)} the receipt call took (fence {fence}); "
        f"B's parked await answered {wake_ms} ms after the grant",
        {
            "ticketId": tid,
            "waiter": w_tid,
            "holdSeconds": hold_s,
            "notPromotedSeconds": stayed,
            "promotionLatencyMs": took * 1000,  # the grant is in the receipt's commit
            "awaitAnsweredMs": float(wake_ms),
        },
    )


async def _hold_after_expiry(
    drill: DrillRole, tid: str, expiry: float, fence: int | None
) -> InFlightJob:
    """A's look once its lease has run out: the lane lists the job in `inFlight`."""
    await asyncio.sleep(max(0.0, expiry - drill.coord_now()) + 0.5)
    deadline = monotonic() + MAX_PROMOTION_LATENESS
    while True:
        st = await drill.client.status(drill.lane)
        if all(t.ticket_id != tid for t in st.held):
            break
        expect(
            monotonic() < deadline,
            f"{tid} is still held {drill.coord_now() - expiry:.1f} s after its lease expired: "
            "the alarm did not reap it",
        )
        await asyncio.sleep(POLL_INTERVAL)
    hold = next((j for j in st.in_flight if j.ticket_id == tid), None)
    if hold is None:
        e = await drill.history_entry(tid)
        granted = ", ".join(f"{t.ticket_id} by {t.machine_id}" for t in st.held) or "nobody"
        raise DrillFailed(
            f"A's {tid} ended ({_row(e)}) after its provider-submitted receipt and no "
            f"provider-terminal one, yet status lists no in-flight job for it (the lane now "
            f"holds: {granted}): {holds_off(drill.lane)}"
        )
    expect(
        hold.machine_id == drill.client.machine_id and hold.fence == fence,
        f"inFlight entry of {tid}: machine {hold.machine_id}, fence {hold.fence}",
    )
    expect(
        hold.submitted_at <= expiry <= hold.hold_until,
        f"inFlight entry of {tid}: submittedAt {hold.submitted_at}, holdUntil "
        f"{hold.hold_until}, the lease expired at {expiry}",
    )
    return hold


async def _step7_b(drill: DrillRole) -> StepResult:
    sig = await drill.barrier.wait("s7", "hold its short lease and record provider-submitted")
    a_tid, exp = sig.data.split("|")
    expiry = float(exp)
    r = await drill.acquire(WAITER_SCENE, DRILL_LEASE_SECONDS)
    tid = r.ticket_id
    drill.keep.pop((drill.lane, tid), None)  # its parked awaits keep it alive
    expect(
        not r.granted and r.ticket.state == "queued" and r.ticket.position == 1,
        f"waiter: state={r.ticket.state} position={r.ticket.position}",
    )
    expect(
        drill.coord_now() < expiry - 1.0,
        f"the waiter was queued only {expiry - drill.coord_now():.1f} s before A's expiry; the "
        "machine is too slow for this check — rerun",
    )
    await drill.barrier.signal("s7parked", tid)
    # Watch: parked awaits until IN_FLIGHT_WATCH_SECONDS after A's expiry; a grant fails.
    watch_until = expiry + IN_FLIGHT_WATCH_SECONDS
    calls = 0
    while (left := watch_until - drill.coord_now()) > 0:
        w = await drill.client.await_ticket(drill.lane, tid, max(1, min(60, math.ceil(left))))
        calls += 1
        if w.ticket.state != "queued":
            late = (w.ticket.held_at or drill.coord_now()) - expiry
            raise DrillFailed(
                f"B's waiter {tid} became {w.ticket.state} {late:+.1f} s after A's lease "
                f"expired, while A's job was in flight (provider-submitted, no "
                f"provider-terminal): {holds_off(drill.lane)}"
            )
    stayed = drill.coord_now() - expiry
    st = await drill.client.status(drill.lane)
    expect(
        all(t.ticket_id != a_tid for t in st.held),
        f"A's {a_tid} is still held {stayed:.1f} s after its lease expired",
    )
    hold = next((j for j in st.in_flight if j.ticket_id == a_tid), None)
    if hold is None:
        raise DrillFailed(f"status lists no in-flight job for A's {a_tid}: {holds_off(drill.lane)}")
    expect(
        not st.held and [t.ticket_id for t in st.queued] == [tid],
        f"status: held {[t.ticket_id for t in st.held]}, queued "
        f"{[t.ticket_id for t in st.queued]}; expected nothing held and only {tid} queued",
    )
    t0 = monotonic()
    task = asyncio.create_task(drill.await_until_not_queued(tid, drill.timeout))
    await asyncio.sleep(0.2)  # parked before A is told to write provider-terminal
    await drill.barrier.signal("s7blocked", f"{stayed:.1f}")
    try:
        w, more = await task
    finally:
        task.cancel()
    answered = drill.coord_now()
    parked = monotonic() - t0
    expect(
        w.granted and w.ticket.state == "held" and w.ticket.held_at is not None,
        f"after {parked:.1f} s the waiter is {w.ticket.state} (granted={w.granted}): A's "
        "provider-terminal receipt did not promote it",
    )
    held_at = w.ticket.held_at or 0.0
    wake = answered - held_at
    await drill.barrier.signal("s7done", f"{tid}|{held_at:.6f}|{wake * 1000:.0f}|{w.ticket.fence}")
    await drill.release_expected(tid, "the waiter")
    return StepResult(
        "7",
        True,
        f"waiter {tid} queued behind A's {a_tid}: not promoted for {stayed:.1f} s after A's "
        f"lease expired ({calls} parked await(s); A's job in flight, held until submittedAt + "
        f"{hold.hold_until - hold.submitted_at:.0f} s); A's provider-terminal receipt promoted "
        f"it (fence {w.ticket.fence}): the parked await answered {ms(wake)} after the grant "
        f"({more} call(s))",
        {"ticketId": tid, "inFlightTicket": a_tid, "notPromotedSeconds": stayed,
         "awaitAnsweredMs": wake * 1000},
    )  # fmt: skip


def _row(e: HistoryEntry | None) -> str:
    if e is None:
        return "no render-log row"
    return (
        f"outcome {e.outcome}, inFlightUntil {e.in_flight_until}, inFlightEnded {e.in_flight_ended}"
    )


__all__ = ["holds_off", "job_payload", "step7"]
