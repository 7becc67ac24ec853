"""Drill step 8 (`lane drill --partition` only; docs/protocol.md#acceptance-drill): B's network
is cut while it holds a 15 s lease and heartbeats. The lease expires and A's parked waiter is
promoted by the alarm; once B's link is back, B reads `refreshed: false` three times, parks as
lease-lost (nothing resubmitted), and its late release cannot overwrite `expired` (history:
outcome expired + lateOutcome lease-lost). The cut and the restore are done by whoever runs the
drill when the `ACTION:` lines say so (scripts/drill-netns.sh does it).
"""

from __future__ import annotations

import asyncio
import contextlib

from client.api import LaneClient
from client.clock import monotonic
from client.drill.common import (
    DRILL_LEASE_SECONDS,
    LEASE_LOST_AFTER,
    MAX_PROMOTION_LATENESS,
    PARTITION_CALL_TIMEOUT,
    PARTITION_HEARTBEAT_INTERVAL,
    SHORT_LEASE_SECONDS,
    StepResult,
    expect,
    is_transient,
)
from client.drill.role import DrillRole
from client.errors import LaneClientError


async def step8(drill: DrillRole) -> StepResult:
    if drill.role == "b":
        return await _step8_b(drill)
    sig = await drill.barrier.wait("s8held", "hold its short lease")
    b_tid = sig.data
    r = await drill.acquire("shared-queue-drill-partition-waiter", DRILL_LEASE_SECONDS)
    drill.keep.pop((drill.lane, r.ticket_id), None)
    expect(
        not r.granted and r.ticket.state == "queued" and r.ticket.position == 1,
        f"waiter: state={r.ticket.state} position={r.ticket.position}",
    )
    t0 = monotonic()
    task = asyncio.create_task(
        drill.await_until_not_queued(r.ticket_id, drill.timeout + SHORT_LEASE_SECONDS)
    )
    await asyncio.sleep(0.2)
    await drill.barrier.signal("s8parked", r.ticket_id)
    try:
        w, calls = await task
    finally:
        task.cancel()
    parked = monotonic() - t0
    expect(
        w.granted and w.ticket.state == "held",
        f"after {parked:.1f} s A's waiter is {w.ticket.state}: B's lease never expired "
        "(was B's network cut?)",
    )
    e = await drill.history_entry(b_tid)
    expect(
        e is not None and e.outcome == "expired" and e.ended_at is not None,
        f"history of B's {b_tid}: {e.outcome if e else 'missing'}, expected expired",
    )
    assert e is not None and e.ended_at is not None
    late = (w.ticket.held_at or 0.0) - e.ended_at
    expect(
        0.0 <= late <= MAX_PROMOTION_LATENESS,
        f"promoted {late:+.3f} s relative to B's expiry",
    )
    drill.emit(
        f"ACTION: restore-link-b — reconnect computer B ({drill.partner_machine}) to the "
        "network now"
    )
    done = await drill.barrier.wait("s8done", "come back and report lease-lost")
    e2 = await drill.history_entry(b_tid)
    expect(
        e2 is not None and e2.outcome == "expired" and e2.late_outcome == "lease-lost",
        f"history of {b_tid}: outcome {e2.outcome if e2 else None}, lateOutcome "
        f"{e2.late_outcome if e2 else None}; expected expired + lease-lost",
    )
    await drill.release_expected(r.ticket_id, "A's waiter")
    return StepResult(
        "8",
        True,
        f"B's {b_tid} expired while B was cut off; the alarm promoted A's {r.ticket_id} "
        f"{late * 1000:.0f} ms after expiry (parked {parked:.1f} s, {calls} await call(s)); "
        f"B reported {done.data}; history: outcome expired, lateOutcome lease-lost",
        {"ticketId": r.ticket_id, "expiredTicket": b_tid, "latenessMs": late * 1000},
    )


async def _step8_b(drill: DrillRole) -> StepResult:
    r = await drill.acquire("shared-queue-drill-partition", SHORT_LEASE_SECONDS)
    tid = r.ticket_id
    expect(
        r.granted and r.ticket.state == "held",
        f"B's short lease not granted: state={r.ticket.state}",
    )
    hb_client = LaneClient(
        drill.settings.url or "",
        drill.settings.token or "",
        drill.settings.machine_id or "",
        drill.settings.claim_id,
        timeout=PARTITION_CALL_TIMEOUT,
        required=True,
    )
    counts = {"refreshed": 0, "no-answer": 0, "false": 0}
    lost = asyncio.Event()

    async def heartbeats() -> None:
        in_a_row = 0
        while in_a_row < LEASE_LOST_AFTER:
            try:
                h = await hb_client.heartbeat(drill.lane, tid, SHORT_LEASE_SECONDS)
            except LaneClientError as exc:
                if not is_transient(exc):
                    raise
                counts["no-answer"] += 1
            else:
                if h.refreshed:
                    counts["refreshed"] += 1
                    in_a_row = 0
                else:
                    counts["false"] += 1
                    in_a_row += 1
                    drill.note(
                        f"heartbeat of {tid}: refreshed=false ({h.reason}) "
                        f"{in_a_row}/{LEASE_LOST_AFTER}"
                    )
                    if in_a_row >= LEASE_LOST_AFTER:
                        break
            await asyncio.sleep(PARTITION_HEARTBEAT_INTERVAL)
        lost.set()

    beat = asyncio.create_task(heartbeats())
    try:
        await drill.barrier.signal("s8held", tid)
        await drill.barrier.wait("s8parked", "park its waiter")
        drill.emit(
            f"ACTION: cut-link-b — disconnect computer B ({drill.client.machine_id}) from the "
            f"network now; A will say when to reconnect (B holds {tid}, lease "
            f"{SHORT_LEASE_SECONDS:g} s)"
        )
        limit = drill.timeout + SHORT_LEASE_SECONDS
        done, _ = await asyncio.wait({beat}, timeout=limit)
        expect(
            beat in done,
            f"no lease-lost within {limit:g} s (heartbeats: {counts}); was the link cut "
            "and restored?",
        )
        beat.result()
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError, LaneClientError):
            await beat
        await hb_client.close()
    expect(
        counts["no-answer"] >= 1,
        f"every heartbeat was answered ({counts}): the link was never cut",
    )
    drill.note(f"parked as lease-lost: {tid} (needs: rerender:lease-lost; nothing resubmitted)")
    # The link just came back: calls are retried through transient failures.
    rel = await drill.barrier.retrying(
        lambda: drill.client.release(drill.lane, tid, "lease-lost", None, "lane drill")
    )
    expect(
        not rel.released and rel.reason in ("expired", "already-done"),
        f"late release: released={rel.released} reason={rel.reason} outcome={rel.outcome}",
    )
    e = await drill.barrier.retrying(lambda: drill.history_entry(tid))
    expect(
        e is not None and e.outcome == "expired" and e.late_outcome == "lease-lost",
        f"history of {tid}: outcome {e.outcome if e else None}, lateOutcome "
        f"{e.late_outcome if e else None}",
    )
    await drill.barrier.signal(
        "s8done", f"{counts['no-answer']} unanswered, {counts['false']}x refreshed=false"
    )
    return StepResult(
        "8",
        True,
        f"held {tid}; cut off: {counts['no-answer']} heartbeats unanswered; back: "
        f"{counts['false']}x refreshed=false (expired) → parked lease-lost; late release → "
        "released=false reason=expired; history: outcome expired, lateOutcome lease-lost",
        {"ticketId": tid, "heartbeats": counts},
    )


__all__ = ["step8"]
