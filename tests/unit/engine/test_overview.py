"""The control room's lane operations (coordinator/engine/overview.py): the reads each one
declares (`needs`) and the view it builds from what the store answered (`run`)."""

from __future__ import annotations

from coordinator.engine.model import Incident, Receipt, Ticket, TicketState
from coordinator.engine.overview import IncidentsOp, OverviewOp, SummaryOp, overview_lane
from coordinator.engine.store import NO_NEEDS, Needs, Reads
from coordinator.protocol.constants import OVERVIEW_PROJECTS_LIMIT, RECENT_RECEIPTS_LIMIT
from coordinator.protocol.queries import OverviewParams
from tests.unit.kit import LANE, T0, Harness


def done(tid: str, seq: int, project: str = "p") -> Ticket:
    """An ended ticket, as the store's history returns it."""
    return Ticket(
        tid, LANE, TicketState.DONE, "mA", "cA", project, f"s{seq}", "h", seq, T0, 60.0, T0,
        held_at=T0 + 1, ended_at=T0 + 5, fence=seq, outcome="completed",
    )  # fmt: skip


def receipt(n: int, verified: bool | None = True) -> Receipt:
    return Receipt(f"r{n}", f"t{n}", "lease-acquired", "mA", "{}", "sha256:x", verified, T0 + n)


INCIDENT = Incident("lease-expired", T0, "t1", "mA", {"fence": 1})


def busy() -> Harness:
    """A capacity-1 lane: one ticket held (project a), one queued (project b)."""
    h = Harness(capacity=1)
    h.acquire("a")
    h.acquire("b")
    return h


# ---------------------------------------------------------------- summary and incidents


def test_summary_reads_nothing_and_counts_the_lane() -> None:
    h = busy()
    op = SummaryOp()
    assert op.needs(h.core) is NO_NEEDS and not op.creates
    s = op.run(h.core, T0, Reads()).reply
    assert (s.lane, s.enforced, s.capacity, s.held, s.queued) == (LANE, True, 1, 1, 1)


def test_incidents_reads_the_newest_limit_and_names_the_lane() -> None:
    h = busy()
    op = IncidentsOp(7)
    assert op.needs(h.core) == Needs(incidents=7)
    [row] = op.run(h.core, T0, Reads(incidents=[(42, INCIDENT)])).reply
    assert (row.id, row.lane, row.kind, row.ticket_id, row.detail) == (
        42, LANE, "lease-expired", "t1", {"fence": 1},
    )  # fmt: skip


# ---------------------------------------------------------------- the overview's reads


def test_unfiltered_overview_reads_history_once_for_the_timeline_and_the_log() -> None:
    core = busy().core
    q = OverviewParams(history=3, limit=10, incidents=5)
    assert OverviewOp(q).needs(core) == Needs(
        history=(10, None), log=None, recent_receipts=RECENT_RECEIPTS_LIMIT, incidents=5
    )
    q = OverviewParams(history=30, limit=10)
    assert OverviewOp(q).needs(core).history == (30, None)


def test_a_project_filter_reads_the_log_separately() -> None:
    core = busy().core
    q = OverviewParams(history=3, limit=10, project="a")
    needs = OverviewOp(q).needs(core)
    assert needs.history == (3, None) and needs.log == (10, "a")


def test_a_lane_outside_the_chosen_log_reads_no_log() -> None:
    core = busy().core
    q = OverviewParams(history=3, limit=10, lane="other:main")
    needs = OverviewOp(q).needs(core)
    assert needs.history == (3, None) and needs.log is None
    assert OverviewOp(OverviewParams(history=3, lane=LANE)).needs(core).log is None  # shared
    # No timeline and no log: no history read at all.
    assert OverviewOp(OverviewParams(history=0, lane="other:main")).needs(core).history is None


# ---------------------------------------------------------------- the overview's view


def test_the_shared_history_read_serves_the_timeline_and_the_log() -> None:
    h = busy()
    tickets = [done(f"t{n}", n) for n in range(9, 0, -1)]  # newest first
    q = OverviewParams(history=2, limit=4, queued=5)
    view = OverviewOp(q).run(h.core, T0, Reads(history=tickets, incidents=[(1, INCIDENT)])).reply
    assert [e.ticket_id for e in view.lane.history.entries] == ["t9", "t8"]
    assert [e.ticket_id for e in view.log] == ["t9", "t8", "t7", "t6"]
    assert {e.lane for e in view.log} == {LANE}
    assert [i.id for i in view.incidents] == [1]
    assert [t.ticket_id for t in view.lane.held] == ["t_0001"]
    assert [t.ticket_id for t in view.lane.queued] == ["t_0002"]
    assert view.lane.queued_total == 1 and view.lane.now == T0


def test_a_filtered_log_comes_from_its_own_read_and_an_other_lanes_log_is_empty() -> None:
    h = busy()
    reads = Reads(history=[done("t1", 1)], log=[done("t2", 2, "a")])
    view = OverviewOp(OverviewParams(project="a")).run(h.core, T0, reads).reply
    assert [e.ticket_id for e in view.log] == ["t2"]
    assert [e.ticket_id for e in view.lane.history.entries] == ["t1"]
    # Another lane's log: none read (needs asked for none), none listed.
    other = Reads(history=[done("t1", 1)])
    view = OverviewOp(OverviewParams(lane="other:main")).run(h.core, T0, other).reply
    assert view.log == [] and [e.ticket_id for e in view.lane.history.entries] == ["t1"]


def test_receipts_are_cut_but_every_mismatch_among_them_is_listed_unchecked_ones_not() -> None:
    h = busy()
    recs = [receipt(1), receipt(2, verified=False), receipt(3, None), receipt(4, verified=False)]
    q = OverviewParams(receipts=1)
    lane = OverviewOp(q).run(h.core, T0, Reads(recent_receipts=recs)).reply.lane
    assert [r.receipt_id for r in lane.recent_receipts] == ["r1"]
    assert [r.receipt_id for r in lane.receipt_mismatches] == ["r2", "r4"]


def test_projects_are_live_served_and_logged_ones_once_each_sorted() -> None:
    h = busy()  # live: a (held, served), b (queued)
    reads = Reads(history=[done("t1", 1, "c"), done("t2", 2, "a")])
    lane = OverviewOp(OverviewParams()).run(h.core, T0, reads).reply.lane
    assert lane.projects == ["a", "b", "c"]
    assert lane.history.retained == h.core.history_count


def test_projects_keep_the_most_recent_ones_when_there_are_too_many() -> None:
    h = Harness(capacity=1)
    h.acquire("zz-live")
    names = [f"p{n:04d}" for n in range(OVERVIEW_PROJECTS_LIMIT + 5)]
    reads = Reads(history=[done(f"t{i}", i, p) for i, p in enumerate(names)])
    q = OverviewParams(history=1, limit=1)
    lane = OverviewOp(q).run(h.core, T0, reads).reply.lane
    assert len(lane.projects) == OVERVIEW_PROJECTS_LIMIT
    assert "zz-live" in lane.projects  # live first: never cut
    assert names[-1] not in lane.projects  # the oldest logged ones go


def test_a_lane_without_reads_has_empty_lists() -> None:
    status = Harness(capacity=1).core.status(T0, 10)
    lane = overview_lane(status)
    assert lane.history.entries == [] and lane.history.retained == 0
    assert lane.recent_receipts == [] and lane.receipt_mismatches == [] and lane.projects == []
    assert (lane.lane, lane.capacity, lane.queued_total) == (LANE, 1, 0)
