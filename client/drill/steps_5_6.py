"""Drill steps 5 and 6 (docs/protocol.md#acceptance-drill), each a function of one role
returning its StepResult:

5. B (the holder machine) records a receipt (201), replays it (200, replay) and sends the same
   receiptId with other content (409 receipt-conflict); A sees exactly the first one.
6. A short lease (15 s) stops heartbeating → the alarm promotes B's parked waiter after expiry
   with no other call on the lane.

Step 7 (the in-flight hold) is in step_7.py, step 8 (`--partition`) in partition.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from client.clock import monotonic
from client.drill.common import (
    DRILL_LEASE_SECONDS,
    DRILL_PROJECT,
    MAX_PROMOTION_LATENESS,
    SHORT_LEASE_SECONDS,
    DrillFailed,
    StepResult,
    expect,
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


__all__ = ["receipt_payload", "step5", "step6"]
