"""A lane's state and queue math (coordinator/engine/lane_queue.py, `LaneQueue`).

The queue math on a queue loaded from a snapshot: the round-robin promotion order, a queued
ticket's position and ETA, the next deadline, keep-alives. The evidence's machines seen
(`_seen` / `flush_seen`), stored through the engine's changes: a machine's row is written
when it is new or its stored time is SEEN_WRITE_SECONDS old (never on every call), the rows
of the last hour are loaded into the snapshot (a reloaded core lists them), older rows are
pruned on write, and a schema-3 lane file gains the table (migration 0004)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from coordinator.constants import EVIDENCE_RECENT_SECONDS, SEEN_WRITE_SECONDS
from coordinator.engine.commands import Acquire, Heartbeat, TicketCall
from coordinator.engine.lane import LaneCore
from coordinator.engine.lane_queue import LaneQueue
from coordinator.engine.model import (
    Change,
    Effects,
    LaneSnapshot,
    Pause,
    PruneMachinesSeen,
    PutCounters,
    PutMachineSeen,
    Ticket,
    TicketState,
)
from coordinator.engine.operations import (
    AcquireOp,
    EvidenceOp,
    HeartbeatOp,
    Operation,
)
from coordinator.engine.store import Reads
from coordinator.protocol.errors import LaneError, NotFound
from coordinator.store.migrate import migrations
from coordinator.store.rows import coalesce
from coordinator.store.sqlite import SqliteLaneStore
from tests.unit.kit import LANE, T0, make_settings

SETTINGS = make_settings(1, lease=600.0, waiter=100_000.0)


def _acquire(machine: str, n: int = 1) -> AcquireOp:
    return AcquireOp(Acquire(machine, f"c-{machine}", "p", f"s{n}", "h", None, f"t_{machine}_{n}"))


def _heartbeat(machine: str, ticket_id: str) -> HeartbeatOp:
    return HeartbeatOp(Heartbeat(TicketCall(machine, f"c-{machine}", ticket_id), None))


def _seen_writes(changes: list[Change]) -> list[PutMachineSeen]:
    return [c for c in changes if isinstance(c, PutMachineSeen)]


class Host:
    """The local queue's lane transaction over one SQLite store (client/local.py): advance,
    the operation, apply, finish; a refusal is returned (its advance still committed)."""

    def __init__(self, store: SqliteLaneStore) -> None:
        self.store = store
        self.core = LaneCore(LANE, SETTINGS, store.load(), 0.0)
        self.written: list[Change] = []

    def reload(self) -> None:
        self.core = LaneCore(LANE, SETTINGS, self.store.load(), 0.0)

    def run(self, op: Operation[Any], now: float) -> Any:
        self.store.begin()
        try:
            changes = list(self.core.advance(now).changes)
            reads = Reads.perform(self.store, op.needs(self.core))
            reply: Any
            try:
                result = op.run(self.core, now, reads)
                reply, changes = result.reply, changes + result.fx.changes
            except LaneError as exc:
                reply = exc
            self.store.apply(changes)
            self.store.finish(self.core.next_deadline(), now)
        except BaseException:
            self.store.abort()
            raise
        self.written += changes
        return reply

    def evidence(self, now: float) -> dict[str, float]:
        reply = self.run(EvidenceOp(None), now)
        ev = reply.coordinator_evidence
        assert ev.distinct_machines == len(ev.machines_seen)
        return {m.machine_id: m.last_seen_at for m in ev.machines_seen}


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = SqliteLaneStore(tmp_path / "solo+main.sqlite", LANE)
    s.open()
    yield s
    s.close()


def _rows(path: Path) -> dict[str, float]:
    db = sqlite3.connect(path)
    try:
        return dict(db.execute("SELECT machine_id, last_seen_at FROM machines_seen").fetchall())
    finally:
        db.close()


# ---------------------------------------------------------------- the throttle (pure)


def test_a_heartbeat_loop_writes_its_machine_every_throttle_interval_only() -> None:
    core = LaneCore(LANE, SETTINGS, LaneSnapshot(), T0)
    first = AcquireOp(Acquire("mA", "cA", "p", "s", "h", None, "t_1")).run(core, T0, Reads())
    assert _seen_writes(first.fx.changes) == [PutMachineSeen("mA", T0)]  # new: at once
    assert PruneMachinesSeen(T0 - EVIDENCE_RECENT_SECONDS) in first.fx.changes
    writes: list[PutMachineSeen] = []
    beats = 0
    for step in range(1, 61):  # a heartbeat every 5 s for 300 s
        now = T0 + 5 * step
        writes += _seen_writes(_heartbeat("mA", "t_1").run(core, now, Reads()).fx.changes)
        beats += 1
    assert beats == 60
    assert [w.at - T0 for w in writes] == [30.0 * k for k in range(1, 11)]
    assert SEEN_WRITE_SECONDS == 30.0
    # evidence in memory is exact; only the stored row is throttled
    assert core.machines_seen == {"mA": T0 + 300}


def test_a_second_machine_is_written_at_once() -> None:
    core = LaneCore(LANE, SETTINGS, LaneSnapshot(), T0)
    _acquire("mA").run(core, T0, Reads())
    fx = _acquire("mB").run(core, T0 + 1, Reads()).fx
    assert _seen_writes(fx.changes) == [PutMachineSeen("mB", T0 + 1)]


def test_a_reloaded_core_throttles_from_the_stored_time() -> None:
    snap = LaneSnapshot(machines_seen={"mA": T0})
    core = LaneCore(LANE, SETTINGS, snap, T0)
    assert core.machines_seen == {"mA": T0}
    fx = _acquire("mA").run(core, T0 + 10, Reads()).fx
    assert _seen_writes(fx.changes) == []  # stored 10 s ago: not yet
    fx = _acquire("mA", 2).run(core, T0 + 31, Reads()).fx
    assert _seen_writes(fx.changes) == [PutMachineSeen("mA", T0 + 31)]


def test_coalesce_keeps_the_last_seen_write_and_prune() -> None:
    batch: list[Change] = [
        PutMachineSeen("mA", T0),
        PruneMachinesSeen(T0 - 3600),
        PutMachineSeen("mB", T0 + 1),
        PutCounters(1, 2),
        PutMachineSeen("mA", T0 + 40),
        PruneMachinesSeen(T0 - 3560),
    ]
    assert coalesce(batch) == [
        PutMachineSeen("mB", T0 + 1),
        PutCounters(1, 2),
        PutMachineSeen("mA", T0 + 40),
        PruneMachinesSeen(T0 - 3560),
    ]


# ---------------------------------------------------------------- through the SQLite store


def test_machines_seen_survive_a_reload_and_expire_after_an_hour(
    store: SqliteLaneStore,
) -> None:
    host = Host(store)
    host.run(_acquire("mA"), T0)
    host.run(_acquire("mB"), T0 + 5)
    host.run(_heartbeat("mA", "t_mA_1"), T0 + 20)  # in memory only (stored 20 s ago)
    assert host.evidence(T0 + 21) == {"mA": T0 + 20, "mB": T0 + 5}
    assert _rows(store.path) == {"mA": T0, "mB": T0 + 5}

    host.reload()  # the lane closed as idle, or the server restarted
    assert host.evidence(T0 + 22) == {"mA": T0, "mB": T0 + 5}  # the stored times

    hour_later = T0 + 5 + EVIDENCE_RECENT_SECONDS + 1
    assert host.evidence(hour_later) == {}
    host.reload()
    assert store.load().machines_seen == {}  # older than the lane's last `now` less an hour
    host.run(_acquire("mC"), hour_later)  # a write prunes the old rows
    assert _rows(store.path) == {"mC": hour_later}


def test_a_refused_call_is_written_with_the_next_answer(store: SqliteLaneStore) -> None:
    host = Host(store)
    host.run(_acquire("mA"), T0)
    refused = host.run(_heartbeat("mB", "t_missing"), T0 + 1)
    assert isinstance(refused, NotFound)
    assert host.evidence(T0 + 2) == {"mA": T0, "mB": T0 + 1}  # seen, in memory
    assert _rows(store.path) == {"mA": T0}  # a refusal changes nothing
    host.run(_heartbeat("mA", "t_mA_1"), T0 + 3)
    assert _rows(store.path) == {"mA": T0, "mB": T0 + 1}


def test_schema_3_lane_file_upgrades_to_0004(tmp_path: Path) -> None:
    path = tmp_path / "solo+main.sqlite"
    old = SqliteLaneStore(path, LANE, max_migration=3)
    old.open()
    try:
        assert old.schema_version() == 3
        old.begin()
        old.apply([PutCounters(0, 2)])
        old.finish(None, T0)
    finally:
        old.close()
    db = sqlite3.connect(path)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        db.close()
    assert "machines_seen" not in tables

    new = SqliteLaneStore(path, LANE)
    new.open()
    try:
        assert new.schema_version() == migrations()[-1][0] and migrations()[3][0] == 4
        assert migrations()[3][1] == "0004_machines_seen.sql"
        snap = new.load()
        assert snap.machines_seen == {} and snap.next_seq == 2 and snap.version == 1
        new.begin()
        new.apply([PutMachineSeen("mA", T0 + 1), PutCounters(0, 3)])
        new.finish(None, T0 + 1)
        assert new.load().machines_seen == {"mA": T0 + 1}
    finally:
        new.close()


def test_a_stored_time_never_goes_back(store: SqliteLaneStore) -> None:
    """Two writers (processes, replicas) may store one machine out of order: the later time
    stays."""
    for at in (T0 + 50, T0 + 10):
        store.begin()
        store.apply([PutMachineSeen("mA", at)])
        store.finish(None, T0 + 50)
    assert store.load().machines_seen == {"mA": T0 + 50}


# ---------------------------------------------------------------- the queue math


def _queued(tid: str, seq: int, project: str, seen: float = T0) -> Ticket:
    return Ticket(tid, LANE, TicketState.QUEUED, "mA", "cA", project, tid, "h", seq, T0, 60.0, seen)


def _held(tid: str, seq: int, held_at: float) -> Ticket:
    t = Ticket(tid, LANE, TicketState.HELD, "mA", "cA", "p", tid, "h", seq, T0, 60.0, T0)
    t.held_at, t.lease_expires_at, t.fence = held_at, held_at + 60.0, seq
    return t


def _queue(*live: Ticket, capacity: int = 1, served: dict[str, int] | None = None) -> LaneQueue:
    snap = LaneSnapshot(live=list(live), project_served=served or {})
    settings = make_settings(capacity, hold=300.0, waiter=600.0)
    return LaneQueue(LANE, settings, snap, T0)


def test_projects_take_turns_never_served_first_then_least_recently_served() -> None:
    q = _queue(
        _queued("a1", 1, "a"),
        _queued("a2", 2, "a"),
        _queued("a3", 3, "a"),
        _queued("b1", 4, "b"),
        _queued("c1", 5, "c"),
        served={"a": 7, "c": 3},
    )
    order = [t.ticket_id for t in q.promotion_order(10)]
    assert order == ["b1", "c1", "a1", "a2", "a3"]
    assert [q.position(q.live[tid]) for tid in order] == [1, 2, 3, 4, 5]
    assert [t.ticket_id for t in q.promotion_order(2)] == ["b1", "c1"]


def test_a_second_ticket_of_a_project_waits_for_every_other_projects_first() -> None:
    q = _queue(_queued("a1", 1, "a"), _queued("a2", 2, "a"), _queued("b1", 3, "b"))
    assert [t.ticket_id for t in q.promotion_order(10)] == ["a1", "b1", "a2"]
    assert q.position(q.live["a2"]) == 3


def test_a_held_ticket_has_no_place() -> None:
    q = _queue(_held("h1", 1, T0))
    assert q.position(q.live["h1"]) == 0 and q.queued_count() == 0


def test_eta_is_the_slots_free_time_plus_whole_waves_of_holds() -> None:
    q = _queue(_held("h1", 1, T0), _queued("a1", 2, "a"), _queued("b1", 3, "b"))
    now = T0 + 100
    assert q.eta(0, now) == 0.0
    assert q.eta(1, now) == 200.0  # the held slot frees after 300 - 100 s
    assert q.eta(2, now) == 500.0  # one more hold
    q.pause = Pause("provider-human-check", now, now + 50, "mA", None, "h1")
    assert q.eta(1, now) == 250.0  # the pause left comes first


def test_the_hold_estimate_is_the_mean_of_measured_holds() -> None:
    q = _queue()
    assert q.hold_estimate() == 300.0  # the default, before any hold was measured
    q.hold_samples.add("a", 10.0)
    q.hold_samples.add("b", 30.0)
    assert q.hold_estimate() == 20.0


def test_the_next_deadline_is_the_earliest_lease_waiter_or_pause_end() -> None:
    assert _queue().next_deadline() is None
    q = _queue(_held("h1", 1, T0), _queued("a1", 2, "a", seen=T0))
    assert q.next_deadline() == T0 + 60.0  # the lease, before the waiter's T0 + 600
    q.pause = Pause("provider-human-check", T0, T0 + 5, "mA", None, "h1")
    assert q.next_deadline() == T0 + 5
    assert not q.is_idle()
    assert _queue().is_idle()


def test_a_restored_keepalive_moves_the_waiter_deadline_back() -> None:
    q = _queue(_queued("a1", 1, "a", seen=T0))
    q._keepalive(q.live["a1"], T0 + 100)
    assert q.next_deadline() == T0 + 700
    q.restore_keepalive("a1", T0)
    assert q.next_deadline() == T0 + 600
    q.restore_keepalive("nobody", T0)  # an unknown ticket is ignored


def test_flush_writes_only_the_machines_due_and_prunes_the_hour() -> None:
    q = _queue()
    q._seen("mA", T0)
    fx = Effects()
    q.flush_seen(fx, T0)
    assert fx.changes == [
        PutMachineSeen("mA", T0),
        PruneMachinesSeen(T0 - EVIDENCE_RECENT_SECONDS),
    ]
    q._seen("mA", T0 + 1)  # stored 1 s ago: not due
    again = Effects()
    q.flush_seen(again, T0 + 1)
    assert again.changes == []
    assert q.machines_seen["mA"] == T0 + 1
