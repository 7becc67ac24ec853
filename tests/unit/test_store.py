"""SqliteLaneStore (coordinator/store/sqlite.py) on real temp files."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.core.lane import LaneCore
from coordinator.core.model import (
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
from coordinator.store.sqlite import SqliteLaneStore, migrations

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


def reopen(s: SqliteLaneStore) -> SqliteLaneStore:
    s.close()
    again = SqliteLaneStore(s.path, LANE)
    again.open()
    return again


# ---------------------------------------------------------------- round trips


def test_empty_store_loads_empty_snapshot(store: SqliteLaneStore) -> None:
    snap = store.load(LANE)
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
    store.apply([PutTicket(held), PutTicket(done), PutTicket(queued)])
    store = reopen(store)
    try:
        for t in (held, done, queued):
            assert store.get_ticket(t.ticket_id) == t
        snap = store.load(LANE)
        assert snap.live == [held, queued]  # live only, in seq order
        assert snap.history_count == 1
    finally:
        store.close()


def test_ticket_upsert_updates_state(store: SqliteLaneStore) -> None:
    t = ticket("t_1", 1)
    store.apply([PutTicket(t)])
    t.state = TicketState.HELD
    t.held_at, t.lease_expires_at, t.fence = T0 + 3, T0 + 63, 1
    store.apply([PutTicket(t)])
    t.state, t.outcome, t.ended_at = TicketState.EXPIRED, "expired", T0 + 63
    store.apply([PutTicket(t)])
    assert store.get_ticket("t_1") == t
    assert store.load(LANE).live == []


def test_counters_projects_pause_round_trip(store: SqliteLaneStore) -> None:
    pause = Pause("provider-human-check", T0, T0 + 900, "mA", None, "t_1")
    store.apply(
        [
            PutCounters(last_fence=7, next_seq=12),
            PutProjectServed("A", 3, T0),
            PutProjectServed("B", 7, T0 + 1),
            PutProjectServed("A", 5, T0 + 2),  # later grant wins
            PutPause(pause),
        ]
    )
    store = reopen(store)
    try:
        snap = store.load(LANE)
        assert (snap.last_fence, snap.next_seq) == (7, 12)
        assert snap.project_served == {"A": 5, "B": 7}
        assert snap.pause == pause
        store.apply([PutCounters(8, 13)])
        store.apply([PutPause(None)])
        snap = store.load(LANE)
        assert (snap.last_fence, snap.next_seq) == (8, 13)
        assert snap.pause is None
    finally:
        store.close()


def test_receipts_round_trip(store: SqliteLaneStore) -> None:
    r1 = receipt("t_1", "lease-acquired", T0)
    r2 = receipt("t_1", "provider-submitted", T0 + 5, verified=False)
    r3 = receipt("t_2", "lease-acquired", T0 + 3)
    store.apply([PutReceipt(r1), PutReceipt(r2), PutReceipt(r3)])
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
    store.apply([PutReceipt(r)])
    with pytest.raises(StoreError):
        store.apply([PutReceipt(r)])
    assert store.recent_receipts(50) == [r]


def test_incidents_round_trip_and_last_collision(store: SqliteLaneStore) -> None:
    i1 = Incident("lease-expired", T0, "t_1", "mA", {"fence": 1})
    i2 = Incident("duplicate-collision", T0 + 1, "t_2", "mB", {"ticketId": "t_2", "n": [1]})
    i3 = Incident("provider-cooldown-started", T0 + 2, None, None, {})
    store.apply([PutIncident(i1), PutIncident(i2), PutIncident(i3)])
    rows = store.incidents(10)
    assert [i for _, i in rows] == [i3, i2, i1]  # newest first
    ids = [n for n, _ in rows]
    assert ids == sorted(ids, reverse=True)
    assert [i for _, i in store.incidents(1)] == [i3]
    snap = store.load(LANE)
    assert snap.incident_count == 3
    assert snap.last_collision == {"ticketId": "t_2", "n": [1]}


def test_recent_holds_in_snapshot(store: SqliteLaneStore) -> None:
    changes = []
    for i in range(25):
        held_at = T0 + 100 * i
        changes.append(PutTicket(ended(f"t_{i}", i + 1, held_at + i + 1, held_at=held_at)))
    changes.append(PutTicket(ended("t_q", 99, T0 + 9999)))  # never held: no hold sample
    store.apply(changes)
    snap = store.load(LANE)
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
    store.apply(h.changes)
    store = reopen(store)
    try:
        snap = store.load(LANE)
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
    store.apply([PutReceipt(r)])
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
        store.apply(batch)
    assert "UNIQUE" not in exc.value.message  # never the driver's text
    snap = store.load(LANE)
    assert snap == LaneSnapshot()
    assert store.get_ticket("t_1") is None
    assert store.recent_receipts(50) == [r]
    assert store.incidents(10) == []
    # The store still works after the failed commit.
    store.apply([PutTicket(ticket("t_1", 1))])
    assert store.get_ticket("t_1") is not None


def test_constraint_one_live_ticket_per_identity(store: SqliteLaneStore) -> None:
    store.apply([PutTicket(ticket("t_1", 1, scene="s"))])
    with pytest.raises(StoreError):
        store.apply([PutTicket(ticket("t_2", 2, scene="s"))])
    # Once the first one ended, the identity is free again.
    store.apply(
        [PutTicket(ended("t_1", 1, T0 + 5, scene="s")), PutTicket(ticket("t_2", 2, scene="s"))]
    )
    assert [t.ticket_id for t in store.load(LANE).live] == ["t_2"]


def test_closed_store_raises_store_error(path: Path) -> None:
    s = SqliteLaneStore(path, LANE)
    with pytest.raises(StoreError):
        s.load(LANE)
    s.open()
    s.close()
    with pytest.raises(StoreError):
        s.apply([PutCounters(1, 2)])


def test_unopenable_path_is_store_error(tmp_path: Path) -> None:
    s = SqliteLaneStore(tmp_path / "no-such-dir" / "x.sqlite", LANE)
    with pytest.raises(StoreError) as exc:
        s.open()
    assert LANE in exc.value.message
    with pytest.raises(StoreError):
        _ = s.db


# ---------------------------------------------------------------- migrations


def test_migrations_recorded(store: SqliteLaneStore) -> None:
    shipped = migrations()
    assert [v for v, _, _ in shipped] == list(range(1, len(shipped) + 1))
    rows = store.db.execute(
        "SELECT version, name, sha256, applied_at FROM schema_migrations ORDER BY version"
    ).fetchall()
    assert [(r["version"], r["name"]) for r in rows] == [(v, n) for v, n, _ in shipped]
    for r, (_, _, sql) in zip(rows, shipped, strict=True):
        assert r["sha256"] == hashlib.sha256(sql.encode()).hexdigest()
        assert r["applied_at"]
    assert store.schema_version() == shipped[-1][0]
    meta = dict(store.db.execute("SELECT key, value FROM meta").fetchall())
    assert meta["lane"] == LANE


def test_reopen_applies_nothing_twice(path: Path) -> None:
    s = SqliteLaneStore(path, LANE)
    s.open()
    s.apply([PutTicket(ticket("t_1", 1))])
    before = s.db.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall()
    s = reopen(s)
    try:
        after = s.db.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall()
        assert [tuple(r) for r in after] == [tuple(r) for r in before]
        assert s.get_ticket("t_1") is not None
    finally:
        s.close()


def test_upgrade_path_old_receipts_read_null_verdict(path: Path) -> None:
    old = SqliteLaneStore(path, LANE, max_migration=1)
    old.open()
    assert old.schema_version() == 1
    cols = [r["name"] for r in old.db.execute("PRAGMA table_info(receipts)")]
    assert "content_hash_verified" not in cols
    old.db.execute(
        "INSERT INTO receipts (receipt_id, ticket_id, phase, machine_id, payload, content_hash, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        ("t_1:lease-acquired:aaaaaaaaaaaaaaaa", "t_1", "lease-acquired", "mA", "{}", HASH_A, T0),
    )
    old.close()

    new = SqliteLaneStore(path, LANE)
    new.open()
    try:
        assert new.schema_version() == migrations()[-1][0]
        [r] = new.recent_receipts(50)
        assert r.receipt_id == "t_1:lease-acquired:aaaaaaaaaaaaaaaa"
        assert r.content_hash_verified is None
        assert new.get_receipt(r.receipt_id) == r
        # New rows carry a verdict.
        new.apply([PutReceipt(receipt("t_2", verified=False, at=T0 + 1))])
        assert [x.content_hash_verified for x in new.recent_receipts(50)] == [False, None]
    finally:
        new.close()


def test_edited_applied_migration_is_refused(path: Path) -> None:
    s = SqliteLaneStore(path, LANE)
    s.open()
    s.db.execute("UPDATE schema_migrations SET sha256 = ? WHERE version = 1", ("0" * 64,))
    s.close()
    again = SqliteLaneStore(path, LANE)
    with pytest.raises(StoreError) as exc:
        again.open()
    assert "0001" in exc.value.message and "edited" in exc.value.message
    # A refused open leaves the store closed, not half-open.
    with pytest.raises(StoreError):
        _ = again.db
    again.close()
    # Nothing was changed by the refused open.
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("SELECT sha256 FROM schema_migrations WHERE version = 1").fetchone() == (
            "0" * 64,
        )
    finally:
        raw.close()


# ---------------------------------------------------------------- history and retention


def test_history_newest_first_and_project_filter(store: SqliteLaneStore) -> None:
    store.apply(
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
    store.apply(changes)
    store.apply([PruneHistory(keep=3, excess=3)])
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
    store.apply(h.changes)
    rows = store.history(100, None)
    assert len(rows) == 4 and store.history_count() == 4
    kept = [t.ticket_id for t in rows]
    newest = sorted(h.tickets, key=lambda t: h.t(t).seq, reverse=True)[:4]
    assert kept == newest
    receipts = {r.ticket_id for r in store.recent_receipts(50)}
    assert receipts == set(kept)


def test_prune_incidents_keeps_newest(store: SqliteLaneStore) -> None:
    store.apply(
        [PutIncident(Incident("lease-expired", T0 + i, None, None, {"i": i})) for i in range(6)]
    )
    store.apply([PruneIncidents(keep=2, excess=4)])
    assert [i.detail["i"] for _, i in store.incidents(10)] == [5, 4]
    assert store.load(LANE).incident_count == 2


def test_backup_is_a_consistent_copy(store: SqliteLaneStore, tmp_path: Path) -> None:
    store.apply([PutTicket(ticket("t_1", 1)), PutCounters(0, 2)])
    dest = tmp_path / "backup.sqlite"
    store.backup_to(dest)
    copy = SqliteLaneStore(dest, LANE)
    copy.open()
    try:
        assert copy.get_ticket("t_1") == store.get_ticket("t_1")
        assert copy.load(LANE).next_seq == 2
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
