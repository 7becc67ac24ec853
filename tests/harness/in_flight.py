"""Rule (f) of the recorded-history checker (tests/harness/history.py): in-flight holds
(docs/protocol.md#in-flight). With receipts recorded, a waiter is never granted while held and
in-flight jobs fill the lane.

What it reads: each lane's view (`LaneView`) carries the receipts the server has of the
tickets that may have left a hold — `receipts[ticketId]` = the rows of GET /v1/evidence
(`receiptId`, `phase`, `createdAt`), read by `read_views` — and the lane's configured
`hold_seconds` (in_flight_hold_seconds; None when the test does not say).

The rules, per enforced lane:

- Acknowledged receipts exist: every receipt write the ledger has acknowledged (201 stored or
  200 replay) on a ticket whose receipts the view read is among them, else it is *lost*.
- Which tickets hold: a ticket whose render-log row ended at E with outcome `expired`,
  `lease-lost` or `timeout`, that has a `provider-submitted` receipt created at or before E
  (S: the latest) and no `provider-terminal` one by then, left an in-flight job; with
  `hold_seconds` H known (> 0) and E < S + H it must hold its slot until S + H: the row's
  `inFlightUntil` must be exactly that (none where the receipts say no job was in flight).
  Without H the server's `inFlightUntil` is taken as it is.
- How it ended: a hold ends at its first `provider-terminal` receipt after E (then
  `inFlightEnded` reads `receipt`), else at holdUntil (`expired`); a reconcile or a late
  release (`reconciled:<outcome>`) at a time the receipts do not show (that hold's end is
  not checked, nor the grants after it); a row still holding (`inFlightEnded` null) is listed
  in status `inFlight`, and has no terminal receipt after its end.
- Capacity: held tickets (heldAt to endedAt) and in-flight jobs (E to the hold's end) take
  slots. When a grant happens (a ticket's heldAt), the others that hold a slot at that
  instant — an end at the same instant frees it first, a grant at the same instant with a
  lower fence came first — number fewer than the capacity: a grant while held + in-flight
  fill the lane, with an in-flight job among them, is a violation (a lane full of held
  tickets alone is rule (d)'s).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.harness.history import Entry, LaneView, Report

HOLDING_OUTCOMES = frozenset({"expired", "lease-lost", "timeout"})
SUBMITTED, TERMINAL = "provider-submitted", "provider-terminal"
EPSILON = 1e-6  # seconds: server times after a JSON (and database) round trip
ALARM_SLACK = 10.0  # seconds past holdUntil a view may still show the hold (not yet reaped)


@dataclass(frozen=True)
class Slot:
    """One ticket's use of a slot: held (its lease) or in flight (its job), in server time."""

    ticket_id: str
    kind: str  # held | in-flight
    start: float
    end: float
    fence: int | None = None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def candidates(status: Mapping[str, Any], history: Mapping[str, Any]) -> set[str]:
    """The tickets whose receipts the rule needs: ended so that a job may still run, or on
    record with a hold."""
    out = {str(j["ticketId"]) for j in status.get("inFlight", []) or []}
    for row in history.get("entries", []):
        if row.get("outcome") in HOLDING_OUTCOMES or row.get("inFlightUntil") is not None:
            out.add(str(row["ticketId"]))
    return out


def receipt_rows(evidence: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The receipts of a GET /v1/evidence reply's job evidence (every phase)."""
    job = evidence.get("jobEvidence") or {}
    rows: list[dict[str, Any]] = []
    for phase_rows in (job.get("receipts") or {}).values():
        if isinstance(phase_rows, list):
            rows.extend(r for r in phase_rows if isinstance(r, dict))
    return rows


def check_in_flight(view: LaneView, acked: Iterable[Entry], report: Report) -> None:
    """Rule (f) on one lane (see the module docstring)."""
    _check_receipts_kept(view, acked, report)
    slots = _held_slots(view)
    holds, reconciled = _in_flight_slots(view, report)
    report.in_flight += len(holds) + reconciled
    _check_grants(view, slots, holds, report)


def _check_receipts_kept(view: LaneView, acked: Iterable[Entry], report: Report) -> None:
    for e in acked:
        if e.op != "receipt":
            continue
        tid, rid = e.body.get("ticketId"), e.body.get("receiptId")
        rows = view.receipts.get(str(tid))
        if rows is None:
            continue  # not read: the view did not ask for this ticket's receipts
        if rid not in {r.get("receiptId") for r in rows}:
            report.lost_details.append(
                f"{view.lane}: acknowledged {e.describe()} ({e.body.get('phase')} {rid}) is "
                f"not among ticket {tid}'s receipts on the server"
            )


def _held_slots(view: LaneView) -> list[Slot]:
    out = []
    for row in view.history:
        held, ended = _num(row.get("heldAt")), _num(row.get("endedAt"))
        if held is not None and ended is not None:
            out.append(Slot(str(row["ticketId"]), "held", held, ended, row.get("fence")))
    for t in view.held:
        held = _num(t.get("heldAt"))
        if held is not None:
            out.append(Slot(str(t["ticketId"]), "held", held, math.inf, t.get("fence")))
    return out


def _in_flight_slots(view: LaneView, report: Report) -> tuple[list[Slot], int]:
    """The in-flight jobs' slots, and how many holds ended at a time not on record."""
    lane, bad = view.lane, report.violations
    listed = {str(j["ticketId"]) for j in view.in_flight}
    holds: list[Slot] = []
    reconciled = 0
    still: set[str] = set()
    for row in view.history:
        tid = str(row["ticketId"])
        ended = _num(row.get("endedAt"))
        rows = view.receipts.get(tid)
        until_server = _num(row.get("inFlightUntil"))
        how = row.get("inFlightEnded")
        if how is None and until_server is not None:
            still.add(tid)
        if rows is None or ended is None:
            if until_server is not None:
                bad.append(f"{lane}: ticket {tid} holds until {until_server}, receipts unread")
            continue
        subs = [_num(r.get("createdAt")) for r in rows if r.get("phase") == SUBMITTED]
        terms = sorted(
            t
            for r in rows
            if r.get("phase") == TERMINAL and (t := _num(r.get("createdAt"))) is not None
        )
        submitted = [s for s in subs if s is not None and s <= ended + EPSILON]
        in_flight = (
            row.get("outcome") in HOLDING_OUTCOMES
            and bool(submitted)
            and not any(z <= ended + EPSILON for z in terms)
        )
        until = until_server
        hold = view.hold_seconds
        if hold is not None:
            due = max(submitted) + hold if in_flight and hold > 0 else None
            until = due if due is not None and ended < due - EPSILON else None
            what = (
                f"{lane}: ticket {tid} ended {row.get('outcome')} at {ended} with its job in "
                f"flight (provider-submitted at {max(submitted) if submitted else None}, no "
                "provider-terminal by then)"
            )
            if until is not None and until_server is None:
                bad.append(f"{what}, but the server kept no in-flight hold (hold {hold:g} s)")
            elif until is None and until_server is not None:
                bad.append(
                    f"{lane}: ticket {tid} holds a slot until {until_server} for a job its "
                    f"receipts do not show in flight at its end ({ended})"
                )
            elif (
                until is not None
                and until_server is not None
                and abs(until - until_server) > EPSILON
            ):
                bad.append(f"{what}: holdUntil {until_server}, expected {until}")
        if until is None:
            continue
        later = [z for z in terms if z > ended + EPSILON]
        end = min(until, later[0]) if later else until
        if how is None and until_server is not None:
            if later:
                bad.append(
                    f"{lane}: ticket {tid} still holds its slot after its provider-terminal "
                    f"receipt at {later[0]}"
                )
            elif view.now > until + ALARM_SLACK:
                bad.append(f"{lane}: ticket {tid} still holds its slot past holdUntil {until}")
        elif how == "receipt" and not (later and later[0] < until + EPSILON):
            bad.append(
                f"{lane}: ticket {tid}'s hold ended by a receipt, but no provider-terminal "
                f"receipt of it is on record between its end {ended} and holdUntil {until}"
            )
        elif how == "expired" and later and later[0] < until - EPSILON:
            bad.append(
                f"{lane}: ticket {tid}'s hold ran to holdUntil {until}, though its "
                f"provider-terminal receipt at {later[0]} ends it"
            )
        elif isinstance(how, str) and how.startswith("reconciled:"):
            reconciled += 1  # ended by a reconcile or a late release: when is not on record
            continue
        holds.append(Slot(tid, "in-flight", ended, end))
    if view.complete and listed != still:
        bad.append(
            f"{lane}: status inFlight lists {sorted(listed)}, the render log holds {sorted(still)}"
        )
    return holds, reconciled


def _check_grants(view: LaneView, slots: list[Slot], holds: list[Slot], report: Report) -> None:
    cap = view.capacity
    if cap is None or not holds:
        return
    taken = [*slots, *holds]
    for grant in slots:
        g, fence = grant.start, grant.fence or 0
        others = [
            s
            for s in taken
            if s.ticket_id != grant.ticket_id
            and s.start <= g + EPSILON
            and s.end > g + EPSILON
            and not (s.kind == "held" and abs(s.start - g) <= EPSILON and (s.fence or 0) > fence)
        ]
        jobs = [s.ticket_id for s in others if s.kind == "in-flight"]
        if len(others) >= cap and jobs:
            held = [s.ticket_id for s in others if s.kind == "held"]
            report.violations.append(
                f"{view.lane}: ticket {grant.ticket_id} was granted at {g} (fence "
                f"{grant.fence}) while held + in-flight jobs filled the lane (capacity {cap}): "
                f"held {sorted(held)}, in flight {sorted(jobs)}"
            )


__all__ = [
    "HOLDING_OUTCOMES",
    "Slot",
    "candidates",
    "check_in_flight",
    "receipt_rows",
]
