"""The control room's reads of one lane, as lane operations (every host runs them like the
others, coordinator/engine/transaction.py): a lane's summary for /v1/lanes, its newest
incidents, and its part of /v1/overview."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.engine.lane import LaneCore
from coordinator.engine.operations import Result
from coordinator.engine.store import NO_NEEDS, Needs, Reads
from coordinator.engine.views import history_row, incident_row, log_row, receipt_summary
from coordinator.protocol import replies as wire
from coordinator.protocol.constants import OVERVIEW_PROJECTS_LIMIT, RECENT_RECEIPTS_LIMIT
from coordinator.protocol.queries import OverviewParams


@dataclass(slots=True, frozen=True)
class SummaryOp:
    """The lane's line in /v1/lanes."""

    creates: bool = False

    def needs(self, core: LaneCore) -> Needs:
        return NO_NEEDS

    def run(self, core: LaneCore, now: float, reads: Reads) -> Result[wire.LaneSummary]:
        return Result(core.summary(now))


@dataclass(slots=True, frozen=True)
class IncidentsOp:
    """The lane's newest `limit` incidents."""

    limit: int
    creates: bool = False

    def needs(self, core: LaneCore) -> Needs:
        return Needs(incidents=self.limit)

    def run(self, core: LaneCore, now: float, reads: Reads) -> Result[list[wire.Incident]]:
        return Result([incident_row(core.lane, i, inc) for i, inc in reads.incidents])


@dataclass(slots=True)
class LaneView:
    """One lane's part of /v1/overview: its line, its incidents, its render-log rows."""

    lane: wire.OverviewLane
    incidents: list[wire.Incident]
    log: list[wire.LogEntry]


@dataclass(slots=True, frozen=True)
class OverviewOp:
    """One lane of /v1/overview, reading only bounded rows (see LaneService.overview)."""

    q: OverviewParams
    creates: bool = False

    def _shared(self, core: LaneCore) -> bool:
        """One history read serves the timeline and, unfiltered, the render log."""
        return self.in_log(core) and self.q.project is None

    def in_log(self, core: LaneCore) -> bool:
        return self.q.lane is None or self.q.lane == core.lane

    def needs(self, core: LaneCore) -> Needs:
        q = self.q
        shared = self._shared(core)
        n = max(q.history, q.limit) if shared else q.history
        return Needs(
            history=(n, None) if n else None,
            log=(q.limit, q.project) if self.in_log(core) and not shared else None,
            recent_receipts=RECENT_RECEIPTS_LIMIT,
            incidents=q.incidents,
        )

    def run(self, core: LaneCore, now: float, reads: Reads) -> Result[LaneView]:
        q = self.q
        tickets = reads.history
        logged = tickets[: q.limit] if self._shared(core) else reads.log
        recs = reads.recent_receipts
        live = [t.project for t in core.live.values()]
        served = sorted(core.served, key=lambda p: core.served[p], reverse=True)
        view = overview_lane(
            core.status(now, q.queued),
            history=wire.LaneHistory(
                entries=[history_row(t) for t in tickets[: q.history]],
                retained=core.history_count,
            ),
            recent_receipts=[receipt_summary(r) for r in recs[: q.receipts]],
            receipt_mismatches=[
                receipt_summary(r) for r in recs if r.content_hash_verified is False
            ],
            projects=_projects([*live, *served, *(t.project for t in tickets)]),
        )
        return Result(
            LaneView(
                view,
                [incident_row(core.lane, i, inc) for i, inc in reads.incidents],
                [log_row(core.lane, t) for t in logged],
            )
        )


def overview_lane(
    status: wire.StatusReply,
    *,
    history: wire.LaneHistory | None = None,
    recent_receipts: list[wire.ReceiptSummary] | None = None,
    receipt_mismatches: list[wire.ReceiptSummary] | None = None,
    projects: list[str] | None = None,
) -> wire.OverviewLane:
    """A lane's status plus the overview's bounded reads; a lane with no file yet, or an
    unenforced one, has empty lists and `retained: 0`."""
    return wire.OverviewLane(
        lane=status.lane,
        enforced=status.enforced,
        capacity=status.capacity,
        held=status.held,
        queued=status.queued,
        queued_total=status.queued_total or 0,
        pause=status.pause,
        now=status.now,
        in_flight=status.in_flight,
        eta_error=status.eta_error,
        history=history or wire.LaneHistory(entries=[], retained=0),
        recent_receipts=recent_receipts or [],
        receipt_mismatches=receipt_mismatches or [],
        projects=projects or [],
    )


def _projects(names: list[str]) -> list[str]:
    """Distinct names in the given (most recent first) order, cut, then sorted."""
    return sorted(list(dict.fromkeys(names))[:OVERVIEW_PROJECTS_LIMIT])
