"""SqliteLaneStore (coordinator/store/sqlite.py) on real temp files."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from coordinator.engine.lane import LaneCore
from coordinator.engine.model import (
    Change,
    Incident,
    LaneSnapshot,
    Pause,
    PruneHistory,
    PruneIncidents,
    PutCounters,
    PutIncident,
    PutPause,
    PutProjectServed,
    PutReceipt,
    PutTicket,
    Receipt,
    Ticket,
    TicketState,
)
from coordinator.errors import StoreError
from coordinator.store.migrate import migrations
from coordinator.store.sqlite import SqliteLaneStore

from .kit import LANE, T0, Harness, make_settings

HASH_A = "sha256:" + "a" * 64


def ticket(
    tid: str,
    seq: int,
    *,
    state: TicketState = TicketState.QUEUED,
    project: str = "p",
    scene: str | None = None,
    prompt: str = "h",
    machine: str = "mA",
    claim: str | None = "cA",
    held_at: float | None = None,
    ended_at: float | None = None,
    fence: int | None = None,
    outcome: str | None = None,
) -> Ticket:
    t = Ticket(
        ticket_id=tid,
        lane=LANE,
        state=state,
        machine_id=machine,
        claim_id=claim,
        project=project,
        scene=scene if scene is not None else f"s{seq}",
        prompt_hash=prompt,
        seq=seq,
        enqueued_at=T0 + seq,
        lease_seconds=60.0,
        last_seen_at=T0 + seq,
        held_at=held_at,
        fence=fence,
        outcome=outcome,
        ended_at=ended_at,
    )
    if state in (TicketState.HELD, TicketState.EXPIRED) or (
        state is TicketState.DONE and held_at is not None
    ):
        t.held_at = T0 + seq if held_at is None else held_at
        t.lease_expires_at = t.held_at + 60.0
        t.fence = seq if fence is None else fence
    return t


def ended(
    tid: str,
    seq: int,
    end: float,
    *,
    project: str = "p",
    scene: str | None = None,
    held_at: float | None = None,
) -> Ticket:
    return ticket(
        tid, seq, state=TicketState.DONE, ended_at=end, outcome="completed", project=project,
        scene=scene, held_at=held_at,
    )  # fmt: skip


def receipt(
    ticket_id: str,
    phase: str = "lease-acquired",
    at: float = T0,
    *,
    content_hash: str = HASH_A,
    verified: bool | None = True,
) -> Receipt:
    return Receipt(
        receipt_id=f"{ticket_id}:{phase}:{content_hash.removeprefix('sha256:')[:16]}",
        ticket_id=ticket_id,
        phase=phase,
        machine_id="mA",
        payload_json='{"n":1}',
        content_hash=content_hash,
        content_hash_verified=verified,
        created_at=at,
    )


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "solo+main.sqlite"


@pytest.fixture
def store(path: Path) -> Iterator[SqliteLaneStore]:
    s = SqliteLaneStore(path, LANE)
    s.open()
    yield s
    s.close()


def write(s: SqliteLaneStore, changes: Sequence[Change], *, last_now: float = T0) -> int:
    """One lane transaction of its own (begin / apply / finish): all the changes or none."""
    s.begin()
    try:
        s.apply(changes)
    except BaseException:
        s.abort()
        raise
    return s.finish(None, last_now)


@contextlib.contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection to a lane file (hosts never see the store's own)."""
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    try:
        yield db
    finally:
        db.close()


def reopen(s: SqliteLaneStore) -> SqliteLaneStore:
    s.close()
    again = SqliteLaneStore(s.path, LANE)
    again.open()
    return again


# ---------------------------------------------------------------- round trips


def test_empty_store_loads_empty_snapshot(store: SqliteLaneStore) -> None:
    snap = store.load()
    assert snap == LaneSnapshot()
    assert store.history(100, None) == [] and store.history_count() == 0
    assert store.recent_receipts(50) == [] and store.incidents(10) == []
    assert store.get_ticket("t_x") is None and store.get_receipt("r") is None


def test_ticket_round_trip_every_field(store: SqliteLaneStore) -> None:
    held = ticket("t_1", 1, state=TicketState.HELD, claim=None)
    held.heartbeat_at = T0 + 5
    done = ended("t_2", 2, T0 + 50, held_at=T0 + 10)
    done.late_outcome = "failed"
    done.provider_job_id = "job-7"
    done.note = "a note"
    queued = ticket("t_3", 3, project="q", scene="sc", prompt="ph", machine="mB", claim="cB")
    write(store, [PutTicket(held), PutTicket(done), PutTicket(queued)])
    store = reopen(store)
    try:
        for t in (held, done, queued):
            assert store.get_ticket(t.ticket_id) == t
        snap = store.load()
        assert snap.live == [held, queued]  # live only, in seq order
        assert snap.history_count == 1
    finally:
        store.close()


def test_ticket_upsert_updates_state(store: SqliteLaneStore) -> None:
    t = ticket("t_1", 1)
    write(store, [PutTicket(t)])
    t.state = TicketState.HELD
    t.held_at, t.lease_expires_at, t.fence = T0 + 3, T0 + 63, 1
    write(store, [PutTicket(t)])
    t.state, t.outcome, t.ended_at = TicketState.EXPIRED, "expired", T0 + 63
    write(store, [PutTicket(t)])
    assert store.get_ticket("t_1") == t
    assert store.load().live == []


def test_counters_projects_pause_round_trip(store: SqliteLaneStore) -> None:
    pause = Pause("provider-human-check", T0, T0 + 900, "mA", None, "t_1")
    write(
        store,
        [
            PutCounters(last_fence=7, next_seq=12),
            PutProjectServed("A", 3, T0),
            PutProjectServed("B", 7, T0 + 1),
            PutProjectServed("A", 5, T0 + 2),  # later grant wins
            PutPause(pause),
        ],
    )
    store = reopen(store)
    try:
        snap = store.load()
        assert (snap.last_fence, snap.next_seq) == (7, 12)
        assert snap.project_served == {"A": 5, "B": 7}
        assert snap.pause == pause
        write(store, [PutCounters(8, 13)])
        write(store, [PutPause(None)])
        snap = store.load()
        assert (snap.last_fence, snap.next_seq) == (8, 13)
        assert snap.pause is None
    finally:
        store.close()


def test_receipts_round_trip(store: SqliteLaneStore) -> None:
    r1 = receipt("t_1", "lease-acquired", T0)
    r2 = receipt("t_1", "provider-submitted", T0 + 5, verified=False)
    r3 = receipt("t_2", "lease-acquired", T0 + 3)
    write(store, [PutReceipt(r1), PutReceipt(r2), PutReceipt(r3)])
    store = reopen(store)
    try:
        assert store.get_receipt(r2.receipt_id) == r2
        assert store.recent_receipts(50) == [r2, r3, r1]  # newest first
        assert store.recent_receipts(2) == [r2, r3]
        assert store.receipts_for_ticket("t_1") == [r1, r2]  # oldest first
        assert store.receipts_for_ticket("t_9") == []
    finally:
        store.close()


def test_receipt_is_never_overwritten(store: SqliteLaneStore) -> None:
    r = receipt("t_1")
    write(store, [PutReceipt(r)])
    with pytest.raises(StoreError):
        write(store, [PutReceipt(r)])
    assert store.recent_receipts(50) == [r]


def test_incidents_round_trip_and_last_collision(store: SqliteLaneStore) -> None:
    i1 = Incident("lease-expired", T0, "t_1", "mA", {"fence": 1})
    i2 = Incident("duplicate-collision", T0 + 1, "t_2", "mB", {"ticketId": "t_2", "n": [1]})
    i3 = Incident("provider-cooldown-started", T0 + 2, None, None, {})
    write(store, [PutIncident(i1), PutIncident(i2), PutIncident(i3)])
    rows = store.incidents(10)
    assert [i for _, i in rows] == [i3, i2, i1]  # newest first
    ids = [n for n, _ in rows]
    assert ids == sorted(ids, reverse=True)
    assert [i for _, i in store.incidents(1)] == [i3]
    snap = store.load()
    assert snap.incident_count == 3
    assert snap.last_collision == {"ticketId": "t_2", "n": [1]}


def test_recent_holds_in_snapshot(store: SqliteLaneStore) -> None:
    changes = []
    for i in range(25):
        held_at = T0 + 100 * i
        changes.append(PutTicket(ended(f"t_{i}", i + 1, held_at + i + 1, held_at=held_at)))
    changes.append(PutTicket(ended("t_q", 99, T0 + 9999)))  # never held: no hold sample
    write(store, changes)
    snap = store.load()
    # The 20 most recent holds, oldest first.
    assert snap.recent_holds == [float(i + 1) for i in range(5, 25)]
    assert snap.history_count == 26


def test_core_round_trip_through_store(store: SqliteLaneStore) -> None:
    """Changes a LaneCore emits, applied and loaded back, rebuild the same lane."""
    h = Harness(2, lease=60.0)
    a = h.tid("A")
    h.tid("A")
    h.tid("B")
    h.later(1).tid("C")
    h.tid("B")
    h.later(5).release(a)
    h.cooldown(sorted(h.held())[0], 600)
    h.receipt(sorted(h.held())[0])
    h.acquire("A", "dup", machine="mA")
    h.acquire("A", "dup", machine="mB", claim="cB")  # collision
    write(store, h.changes)
    store = reopen(store)
    try:
        snap = store.load()
        core = LaneCore(LANE, make_settings(2, lease=60.0), snap, h.now)
        assert set(core.held) == h.held()
        assert [t.ticket_id for t in core.promotion_order(100)] == h.order()
        assert core.last_fence == h.core.last_fence and core.next_seq == h.core.next_seq
        assert core.served == h.core.served
        assert core.pause == h.core.pause
        assert core.last_collision == h.core.last_collision
        assert list(core.holds) == list(h.core.holds)
        assert store.get_ticket(a) == h.t(a)
    finally:
        store.close()


# ---------------------------------------------------------------- atomicity


def test_failed_transaction_leaves_nothing(store: SqliteLaneStore) -> None:
    r = receipt("t_0")
    write(store, [PutReceipt(r)])
    batch: list[Change] = [
        PutTicket(ticket("t_1", 1)),
        PutCounters(5, 6),
        PutProjectServed("A", 5, T0),
        PutPause(Pause("provider-human-check", T0, T0 + 60, "mA", None, "t_1")),
        PutIncident(Incident("lease-expired", T0, "t_1", "mA", {})),
        PutReceipt(receipt("t_1")),
        PutReceipt(r),  # duplicate primary key: the whole batch must fail
    ]
    with pytest.raises(StoreError) as exc:
        write(store, batch)
    assert "UNIQUE" not in exc.value.message  # never the driver's text
    snap = store.load()
    assert snap == LaneSnapshot(version=1, last_now=T0)  # only the receipt's transaction
    assert store.get_ticket("t_1") is None
    assert store.recent_receipts(50) == [r]
    assert store.incidents(10) == []
    # The store still works after the failed commit.
    write(store, [PutTicket(ticket("t_1", 1))])
    assert store.get_ticket("t_1") is not None


def test_constraint_one_live_ticket_per_identity(store: SqliteLaneStore) -> None:
    write(store, [PutTicket(ticket("t_1", 1, scene="s"))])
    with pytest.raises(StoreError):
        write(store, [PutTicket(ticket("t_2", 2, scene="s"))])
    # Once the first one ended, the identity is free again.
    write(
        store,
        [PutTicket(ended("t_1", 1, T0 + 5, scene="s")), PutTicket(ticket("t_2", 2, scene="s"))],
    )
    assert [t.ticket_id for t in store.load().live] == ["t_2"]


def test_closed_store_raises_store_error(path: Path) -> None:
    s = SqliteLaneStore(path, LANE)
    with pytest.raises(StoreError):
        s.load()
    s.open()
    s.close()
    with pytest.raises(StoreError):
        write(s, [PutCounters(1, 2)])


def test_unopenable_path_is_store_error(tmp_path: Path) -> None:
    s = SqliteLaneStore(tmp_path / "no-such-dir" / "x.sqlite", LANE)
    with pytest.raises(StoreError) as exc:
        s.open()
    assert LANE in exc.value.message
    with pytest.raises(StoreError):
        s.load()


# ---------------------------------------------------------------- migrations


def test_migrations_recorded(store: SqliteLaneStore) -> None:
    shipped = migrations()
    assert [v for v, _, _ in shipped] == list(range(1, len(shipped) + 1))
    with raw(store.path) as db:
        rows = db.execute(
            "SELECT version, name, sha256, applied_at FROM schema_migrations ORDER BY version"
        ).fetchall()
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    assert [(r["version"], r["name"]) for r in rows] == [(v, n) for v, n, _ in shipped]
    for r, (_, _, sql) in zip(rows, shipped, strict=True):
        assert r["sha256"] == hashlib.sha256(sql.encode()).hexdigest()
        assert r["applied_at"]
    assert store.schema_version() == shipped[-1][0]
    assert meta["lane"] == LANE


def test_reopen_applies_nothing_twice(path: Path) -> None:
    s = SqliteLaneStore(path, LANE)
    s.open()
    write(s, [PutTicket(ticket("t_1", 1))])
    with raw(path) as db:
        before = db.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall()
    s = reopen(s)
    try:
        with raw(path) as db:
            after = db.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall()
        assert [tuple(r) for r in after] == [tuple(r) for r in before]
        assert s.get_ticket("t_1") is not None
    finally:
        s.close()


def test_upgrade_path_old_receipts_read_null_verdict(path: Path) -> None:
    old = SqliteLaneStore(path, LANE, max_migration=1)
    old.open()
    assert old.schema_version() == 1
    old.close()
    with raw(path) as db:
        cols = [r["name"] for r in db.execute("PRAGMA table_info(receipts)")]
        assert "content_hash_verified" not in cols
        db.execute(
            "INSERT INTO receipts (receipt_id, ticket_id, phase, machine_id, payload, "
            "content_hash, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                "t_1:lease-acquired:aaaaaaaaaaaaaaaa",
                "t_1",
                "lease-acquired",
                "mA",
                "{}",
                HASH_A,
                T0,
            ),
        )
        db.commit()

    new = SqliteLaneStore(path, LANE)
    new.open()
    try:
        assert new.schema_version() == migrations()[-1][0]
        [r] = new.recent_receipts(50)
        assert r.receipt_id == "t_1:lease-acquired:aaaaaaaaaaaaaaaa"
        assert r.content_hash_verified is None
        assert new.get_receipt(r.receipt_id) == r
        # New rows carry a verdict.
        write(new, [PutReceipt(receipt("t_2", verified=False, at=T0 + 1))])
        assert [x.content_hash_verified for x in new.recent_receipts(50)] == [False, None]
    finally:
        new.close()


def test_edited_applied_migration_is_refused(path: Path) -> None:
    s = SqliteLaneStore(path, LANE)
    s.open()
    s.close()
    with raw(path) as db:
        db.execute("UPDATE schema_migrations SET sha256 = ? WHERE version = 1", ("0" * 64,))
        db.commit()
    again = SqliteLaneStore(path, LANE)
    with pytest.raises(StoreError) as exc:
        again.open()
    assert "0001" in exc.value.message and "edited" in exc.value.message
    # A refused open leaves the store closed, not half-open.
    with pytest.raises(StoreError):
        again.load()
    again.close()
    # Nothing was changed by the refused open.
    with raw(path) as db:
        row = db.execute("SELECT sha256 FROM schema_migrations WHERE version = 1").fetchone()
        assert tuple(row) == ("0" * 64,)


def test_upgrade_from_0002_adds_the_lane_head(path: Path) -> None:
    """A 0002 file with a live lane gains `lane_head` (version 0, no deadline, no last_now);
    its state loads unchanged, and the first finish makes it version 1."""
    old = SqliteLaneStore(path, LANE, max_migration=2)
    old.open()
    assert old.schema_version() == 2
    old.close()
    with raw(path) as db:
        assert "lane_head" not in {
            r["name"] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        db.execute(
            "INSERT INTO tickets (ticket_id, seq, state, machine_id, project, scene, prompt_hash, "
            "enqueued_at, lease_seconds, last_seen_at) VALUES "
            "('t_1', 1, 'queued', 'mA', 'p', 's1', 'h', ?, 60, ?)",
            (T0, T0),
        )
        db.execute("INSERT INTO meta (key, value) VALUES ('next_seq', '2')")
        db.commit()

    new = SqliteLaneStore(path, LANE)
    new.open()
    try:
        assert new.schema_version() == 3
        snap = new.load()
        assert [t.ticket_id for t in snap.live] == ["t_1"] and snap.next_seq == 2
        assert (snap.version, snap.last_now) == (0, None)
        head = new.begin()
        assert (head.version, head.last_now) == (0, None)
        new.apply([PutCounters(0, 3)])
        assert new.finish(T0 + 600, T0 + 1) == 1
        with raw(path) as db:
            row = db.execute("SELECT version, next_deadline, last_now FROM lane_head").fetchone()
        assert tuple(row) == (1, T0 + 600, T0 + 1)
    finally:
        new.close()


# ---------------------------------------------------------------- the lane transaction


def test_finish_adds_one_to_the_version_and_keeps_the_latest_now(store: SqliteLaneStore) -> None:
    assert store.begin().version == 0
    assert store.finish(None, T0 + 5) == 1
    assert write(store, [PutCounters(0, 2)], last_now=T0 + 2) == 2  # an earlier now
    head = store.begin()
    assert (head.version, head.last_now) == (2, T0 + 5)  # last_now never runs back
    store.abort()
    snap = store.load()
    assert (snap.version, snap.last_now, snap.next_seq) == (2, T0 + 5, 2)


def test_abort_keeps_nothing_and_no_new_version(store: SqliteLaneStore) -> None:
    store.begin()
    store.apply([PutTicket(ticket("t_1", 1))])
    store.abort()
    assert store.get_ticket("t_1") is None
    assert store.begin().version == 0
    store.abort()


def test_apply_and_finish_need_a_transaction(store: SqliteLaneStore) -> None:
    with pytest.raises(StoreError):
        store.apply([PutCounters(1, 2)])
    with pytest.raises(StoreError):
        store.finish(None, T0)
    store.begin()
    with pytest.raises(StoreError):
        store.begin()  # one transaction at a time
    store.abort()


def test_begin_locks_the_lane_against_another_writer(path: Path) -> None:
    a = SqliteLaneStore(path, LANE)
    b = SqliteLaneStore(path, LANE, busy_timeout_ms=50)
    a.open()
    b.open()
    try:
        a.begin()
        with pytest.raises(StoreError) as exc:
            b.begin()
        assert "busy" in exc.value.message
        a.apply([PutCounters(0, 2)])
        assert a.finish(None, T0) == 1
        assert b.begin().version == 1  # the other writer sees the new version
        b.abort()
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------- history and retention


def test_history_newest_first_and_project_filter(store: SqliteLaneStore) -> None:
    write(store,
        [
            PutTicket(ended("t_1", 1, T0 + 10, project="A")),
            PutTicket(ended("t_2", 2, T0 + 30, project="B")),
            PutTicket(ended("t_3", 3, T0 + 20, project="A")),
            PutTicket(ended("t_4", 4, T0 + 30, project="A")),  # same end as t_2: seq breaks it
            PutTicket(ticket("t_5", 5, project="A")),  # live: not in the log
            PutTicket(ticket("t_6", 6, state=TicketState.EXPIRED, ended_at=T0 + 5, project="B",
                             outcome="expired")),
        ]
    )  # fmt: skip
    assert [t.ticket_id for t in store.history(100, None)] == ["t_4", "t_2", "t_3", "t_1", "t_6"]
    assert [t.ticket_id for t in store.history(2, None)] == ["t_4", "t_2"]
    assert [t.ticket_id for t in store.history(100, "A")] == ["t_4", "t_3", "t_1"]
    assert [t.ticket_id for t in store.history(100, "B")] == ["t_2", "t_6"]
    assert store.history(100, "Z") == []
    assert store.history_count() == 5


def test_prune_history_keeps_newest_and_their_receipts(store: SqliteLaneStore) -> None:
    changes: list[Change] = []
    for i in range(1, 7):
        changes.append(PutTicket(ended(f"t_{i}", i, T0 + 10 * i)))
        changes.append(PutReceipt(receipt(f"t_{i}", at=T0 + 10 * i)))
    live = ticket("t_live", 50)
    changes += [PutTicket(live), PutReceipt(receipt("t_live", at=T0 + 500))]
    write(store, changes)
    write(store, [PruneHistory(keep=3, excess=3)])
    assert [t.ticket_id for t in store.history(100, None)] == ["t_6", "t_5", "t_4"]
    assert store.history_count() == 3
    for i in (1, 2, 3):
        assert store.get_ticket(f"t_{i}") is None
        assert store.receipts_for_ticket(f"t_{i}") == []
    for i in (4, 5, 6):
        assert len(store.receipts_for_ticket(f"t_{i}")) == 1
    # Live tickets and their receipts are never pruned.
    assert store.get_ticket("t_live") == live
    assert len(store.receipts_for_ticket("t_live")) == 1


def test_prune_history_from_core_keeps_retention(store: SqliteLaneStore) -> None:
    h = Harness(1, history=4)
    for i in range(10):
        tid = h.tid(f"p{i % 3}")
        h.receipt(tid)
        h.later(1).release(tid)
    write(store, h.changes)
    rows = store.history(100, None)
    assert len(rows) == 4 and store.history_count() == 4
    kept = [t.ticket_id for t in rows]
    newest = sorted(h.tickets, key=lambda t: h.t(t).seq, reverse=True)[:4]
    assert kept == newest
    receipts = {r.ticket_id for r in store.recent_receipts(50)}
    assert receipts == set(kept)


def test_prune_incidents_keeps_newest(store: SqliteLaneStore) -> None:
    write(
        store,
        [PutIncident(Incident("lease-expired", T0 + i, None, None, {"i": i})) for i in range(6)],
    )
    write(store, [PruneIncidents(keep=2, excess=4)])
    assert [i.detail["i"] for _, i in store.incidents(10)] == [5, 4]
    assert store.load().incident_count == 2


def test_backup_is_a_consistent_copy(store: SqliteLaneStore, tmp_path: Path) -> None:
    write(store, [PutTicket(ticket("t_1", 1)), PutCounters(0, 2)])
    dest = tmp_path / "backup.sqlite"
    store.backup_to(dest)
    copy = SqliteLaneStore(dest, LANE)
    copy.open()
    try:
        assert copy.get_ticket("t_1") == store.get_ticket("t_1")
        assert copy.load().next_seq == 2
    finally:
        copy.close()


def _open_at_once(path: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    st = SqliteLaneStore(Path(path), LANE)
    try:
        st.open()
        results.put("ok")
    except Exception as exc:  # reported to the parent, which asserts on it
        results.put(f"{type(exc).__name__}: {exc} ({exc.__cause__!r})")
    finally:
        st.close()


def test_many_processes_opening_a_new_lane_file_at_once(tmp_path: Path) -> None:
    """The local queue's processes may all open a brand-new lane file together; switching it
    to WAL can answer "database is locked" without waiting, so open() tries again."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for trial in range(20):
        path = str(tmp_path / f"t{trial}+main.sqlite")
        barrier, results = ctx.Barrier(8), ctx.Queue()
        procs = [ctx.Process(target=_open_at_once, args=(path, barrier, results)) for _ in range(8)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        outcomes = [results.get(timeout=10) for _ in procs]
        assert outcomes == ["ok"] * 8, (trial, outcomes)
