"""Drill steps 5-7 (docs/protocol.md#acceptance-drill), each a function of one role returning its
StepResult:

5. B (the holder machine) records a receipt (201), replays it (200, replay) and sends the same
   receiptId with other content (409 receipt-conflict); A sees exactly the first one.
6. A short lease (15 s) stops heartbeating → the alarm promotes B's parked waiter after expiry
   with no other call on the lane.
7. (`--partition` only) B's network is cut while it holds a 15 s lease: A is promoted by the
   alarm, B reads `refreshed: false` three times once back, parks as lease-lost, and its late
   release cannot overwrite `expired`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from client.api import LaneClient
from client.clock import monotonic
from client.drill.common import (
    DRILL_LEASE_SECONDS,
    DRILL_PROJECT,
    LEASE_LOST_AFTER,
    MAX_PROMOTION_LATENESS,
    PARTITION_CALL_TIMEOUT,
    PARTITION_HEARTBEAT_INTERVAL,
    SHORT_LEASE_SECONDS,
    DrillFailed,
    StepResult,
    expect,
    is_transient,
    ms,
    unwrap,
)
from client.drill.role import DrillRole
from client.errors import LaneClientError, NotHolderError, ReceiptConflictError


def receipt_payload(drill: DrillRole) -> dict[str, Any]:
    return {"drill": DRILL_PROJECT, "run": drill.run_id, "step": 5, "check": "receipt"}


async def step5(drill: DrillRole) -> StepResult:
    tid = drill.ids["b"]
    payload = receipt_payload(drill)
    if drill.role == "b":
        t0 = monotonic()
        r1 = await drill.client.receipt(drill.lane, tid, "lease-acquired", payload)
        t1 = monotonic()
        expect(
            r1.stored and r1.http_status == 201,
            f"first write: HTTP {r1.http_status} stored={r1.stored}",
        )
        expect(r1.content_hash_verified is True, "the coordinator did not verify the hash")
        r2 = await drill.client.receipt(drill.lane, tid, "lease-acquired", payload)
        t2 = monotonic()
        expect(
            r2.http_status == 200 and r2.replay and not r2.stored,
            f"replay: HTTP {r2.http_status} replay={r2.replay} stored={r2.stored}",
        )
        other = {**payload, "check": "conflict"}
        try:
            await drill.client.receipt(
                drill.lane, tid, "lease-acquired", other, receipt_id=r1.receipt_id
            )
        except ReceiptConflictError as exc:
            expect(exc.status == 409, f"conflict answered HTTP {exc.status}")
        else:
            raise DrillFailed("same receiptId with other content was accepted (expected 409)")
        t3 = monotonic()
        await drill.barrier.signal("s5", r1.receipt_id)
        return StepResult(
            "5",
            True,
            f"{r1.receipt_id}: 201 stored, hash verified ({ms(t1 - t0)}); replay 200 "
            f"replay=true ({ms(t2 - t1)}); other content 409 receipt-conflict "
            f"({ms(t3 - t2)})",
            {"receiptId": r1.receipt_id, "ticketId": tid},
        )
    rid = (await drill.barrier.wait("s5", "record its receipt")).data
    st = await drill.client.status(drill.lane, include_receipts=True)
    rows = [r for r in (st.recent_receipts or []) if r.receipt_id == rid]
    expect(len(rows) == 1, f"status shows {len(rows)} rows for receipt {rid}, expected 1")
    row = rows[0]
    expect(
        row.machine_id == drill.partner_machine and row.ticket_id == tid,
        f"receipt row by {row.machine_id} on {row.ticket_id}",
    )
    expect(row.content_hash_verified is True, "receipt row not hash-verified")
    expect(row.payload == payload, f"stored payload {row.payload} is not the first write")
    try:
        await drill.client.receipt(drill.lane, tid, "references-applied", payload)
    except LaneClientError as exc:
        inner = unwrap(exc)
        if not isinstance(inner, NotHolderError):
            raise
        refused = f"HTTP {inner.status} not-holder"
    else:
        raise DrillFailed("a non-holder machine's receipt was stored (expected 403)")
    return StepResult(
        "5",
        True,
        f"status shows {rid} once, by B (holder), hash verified, first content kept; "
        f"A's own write on B's ticket: {refused}",
        {"receiptId": rid},
    )


async def step6(drill: DrillRole) -> StepResult:
    if drill.role == "a":
        r = await drill.acquire("shared-queue-drill-short", SHORT_LEASE_SECONDS)
        expect(
            r.granted and r.ticket.state == "held" and r.ticket.lease_expires_at is not None,
            f"short lease not granted: state={r.ticket.state} granted={r.granted}",
        )
        expiry = r.ticket.lease_expires_at or 0.0
        tid = r.ticket_id
        await drill.barrier.signal("s6", f"{tid}|{expiry:.6f}")
        # From here on this role makes no call on the drill lane until B reports.
        await drill.barrier.wait("s6parked", "park its waiter")
        wait_for = drill.timeout + SHORT_LEASE_SECONDS
        sig = await drill.barrier.wait("s6done", "be promoted", timeout=wait_for)
        w_tid, late_ms, parked_s = sig.data.split("|")
        e = await drill.history_entry(tid)
        expect(
            e is not None and e.outcome == "expired",
            f"history of {tid}: {e.outcome if e else 'missing'}, expected expired",
        )
        assert e is not None
        expect(
            e.ended_at is not None and abs(e.ended_at - expiry) < 0.001,
            f"expired at {e.ended_at}, lease said {expiry}",
        )
        inc = await drill.client.incidents(drill.lane, 50)
        reaped = [i for i in inc.incidents if i.kind == "lease-expired" and i.ticket_id == tid]
        expect(len(reaped) == 1, f"{len(reaped)} lease-expired incidents for {tid}")
        return StepResult(
            "6",
            True,
            f"{tid} (lease {SHORT_LEASE_SECONDS:g} s, never heartbeated) expired → history "
            f"outcome expired, incident lease-expired; the alarm promoted B's {w_tid} "
            f"{late_ms} ms after expiry (B parked {parked_s} s in one await)",
            {"ticketId": tid, "waiter": w_tid, "latenessMs": float(late_ms)},
        )
    sig = await drill.barrier.wait("s6", "hold its short lease")
    s_tid, exp = sig.data.split("|")
    expiry = float(exp)
    r = await drill.acquire("shared-queue-drill-waiter", DRILL_LEASE_SECONDS)
    drill.keep.pop((drill.lane, r.ticket_id), None)  # no other call on the lane until promoted
    expect(
        not r.granted and r.ticket.state == "queued" and r.ticket.position == 1,
        f"waiter: state={r.ticket.state} position={r.ticket.position}",
    )
    parked_at = drill.coord_now()
    expect(
        parked_at < expiry - 1.0,
        f"the waiter was parked only {expiry - parked_at:.1f} s before the expiry; the "
        "machine is too slow for this check — rerun",
    )
    wait_s = 60.0
    t0 = monotonic()
    task = asyncio.create_task(drill.client.await_ticket(drill.lane, r.ticket_id, wait_s))
    await asyncio.sleep(0.2)
    await drill.barrier.signal("s6parked", r.ticket_id)
    try:
        w = await task
    finally:
        task.cancel()
    parked = monotonic() - t0
    expect(
        w.granted and w.ticket.state == "held",
        f"after {parked:.1f} s the waiter is {w.ticket.state} (granted={w.granted})",
    )
    expect(
        parked < wait_s - 1.0,
        f"the await answered only at its {wait_s:g} s limit: not woken by the alarm",
    )
    late = (w.ticket.held_at or 0.0) - expiry
    expect(
        0.0 <= late <= MAX_PROMOTION_LATENESS,
        f"promoted {late:+.3f} s relative to the expiry (expected 0..{MAX_PROMOTION_LATENESS:g})",
    )
    await drill.barrier.signal("s6done", f"{r.ticket_id}|{late * 1000:.0f}|{parked:.1f}")
    await drill.release_expected(r.ticket_id, "the waiter")
    return StepResult(
        "6",
        True,
        f"waiter {r.ticket_id} parked in one await {parked:.1f} s; A's {s_tid} expired and "
        f"the alarm promoted it {late * 1000:.0f} ms after expiry (fence {w.ticket.fence})",
        {"ticketId": r.ticket_id, "expiredTicket": s_tid, "latenessMs": late * 1000},
    )


async def step7(drill: DrillRole) -> StepResult:
    if drill.role == "b":
        return await _step7_b(drill)
    sig = await drill.barrier.wait("s7held", "hold its short lease")
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
    await drill.barrier.signal("s7parked", r.ticket_id)
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
    done = await drill.barrier.wait("s7done", "come back and report lease-lost")
    e2 = await drill.history_entry(b_tid)
    expect(
        e2 is not None and e2.outcome == "expired" and e2.late_outcome == "lease-lost",
        f"history of {b_tid}: outcome {e2.outcome if e2 else None}, lateOutcome "
        f"{e2.late_outcome if e2 else None}; expected expired + lease-lost",
    )
    await drill.release_expected(r.ticket_id, "A's waiter")
    return StepResult(
        "7",
        True,
        f"B's {b_tid} expired while B was cut off; the alarm promoted A's {r.ticket_id} "
        f"{late * 1000:.0f} ms after expiry (parked {parked:.1f} s, {calls} await call(s)); "
        f"B reported {done.data}; history: outcome expired, lateOutcome lease-lost",
        {"ticketId": r.ticket_id, "expiredTicket": b_tid, "latenessMs": late * 1000},
    )


async def _step7_b(drill: DrillRole) -> StepResult:
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
        await drill.barrier.signal("s7held", tid)
        await drill.barrier.wait("s7parked", "park its waiter")
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
        "s7done", f"{counts['no-answer']} unanswered, {counts['false']}x refreshed=false"
    )
    return StepResult(
        "7",
        True,
        f"held {tid}; cut off: {counts['no-answer']} heartbeats unanswered; back: "
        f"{counts['false']}x refreshed=false (expired) → parked lease-lost; late release → "
        "released=false reason=expired; history: outcome expired, lateOutcome lease-lost",
        {"ticketId": tid, "heartbeats": counts},
    )


__all__ = ["receipt_payload", "step5", "step6", "step7"]
