"""What only SqliteLaneStore (coordinator/store/sqlite.py) has, on real temp files: lane file
migrations and upgrades, unopenable paths, the busy lock between processes, backups, many
processes creating one lane file. The lane store contract itself (round trips, the lane
transaction, prunes) runs on both stores in tests/store_pg/test_both_stores.py; the records
and `write` come from tests/store_pg/kit.py."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.engine.model import PutCounters, PutReceipt, PutTicket, TicketState
from coordinator.engine.store import Group, StaleLane
from coordinator.errors import StoreError
from coordinator.store.migrate import migrations
from coordinator.store.sqlite import SqliteLaneStore
from tests.store_pg.kit import HASH_A, receipt, ticket, write
from tests.unit.kit import LANE, T0


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "solo+main.sqlite"


@pytest.fixture
def store(path: Path) -> Iterator[SqliteLaneStore]:
    s = SqliteLaneStore(path, LANE)
    s.open()
    yield s
    s.close()


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


# ---------------------------------------------------------------- atomicity


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
        assert new.schema_version() == migrations()[-1][0]
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


# ---------------------------------------------------------------- the write path


def _rows(path: Path) -> dict[str, tuple[Any, ...]]:
    with raw(path) as db:
        got = db.execute("SELECT ticket_id, state, fence, outcome, ended_at FROM tickets")
        return {r[0]: tuple(r[1:]) for r in got.fetchall()}


def test_a_ticket_written_again_updates_its_row(store: SqliteLaneStore) -> None:
    """Once the counters say a ticket's row exists (its seq is below the stored next_seq),
    its later writes are a plain UPDATE; the row ends up as the upsert would leave it."""
    t = ticket("t1", 1)
    write(store, [PutTicket(t), PutCounters(0, 2)])
    t.state, t.fence, t.held_at = TicketState.HELD, 1, T0 + 1
    t.lease_expires_at = T0 + 61
    write(store, [PutTicket(t), PutCounters(1, 2)])
    assert _rows(store.path) == {"t1": ("held", 1, None, None)}
    t.state, t.outcome, t.ended_at = TicketState.DONE, "completed", T0 + 2
    write(store, [PutTicket(t)])
    assert _rows(store.path) == {"t1": ("done", 1, "completed", T0 + 2)}
    again = reopen(store)
    try:
        assert again.load().history_count == 1
    finally:
        again.close()


def test_a_ticket_whose_row_is_gone_is_written_whole(store: SqliteLaneStore, path: Path) -> None:
    t = ticket("t1", 1)
    write(store, [PutTicket(t), PutCounters(0, 2)])
    with raw(path) as db:  # gone behind the store's back (what a prune would do)
        db.execute("DELETE FROM tickets")
        db.commit()
    t.last_seen_at = T0 + 5
    write(store, [PutTicket(t)])  # the UPDATE finds no row: inserted again, in full
    assert _rows(path) == {"t1": ("queued", None, None, None)}


def test_counters_are_written_only_when_they_change(store: SqliteLaneStore, path: Path) -> None:
    write(store, [PutCounters(3, 7)])
    with raw(path) as db:
        db.execute("UPDATE meta SET value = 'x' WHERE key = 'last_fence'")  # a marker
        db.commit()
    write(store, [PutCounters(3, 8)])  # only next_seq changed: last_fence is not rewritten
    with raw(path) as db:
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    assert meta["last_fence"] == "x" and meta["next_seq"] == "8"
    other = SqliteLaneStore(path, LANE)  # a store that does not know them writes both
    other.open()
    try:
        write(other, [PutCounters(3, 9)])
    finally:
        other.close()
    with raw(path) as db:
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    assert meta == {**meta, "last_fence": "3", "next_seq": "9"}


def test_a_prepared_group_commits_and_a_moved_lane_is_refused(
    store: SqliteLaneStore, path: Path
) -> None:
    """The actor's split commit: the group is written (prepare_group, on the event loop),
    then COMMITted (commit_prepared, on a store thread); a lane whose version moved on is
    refused (StaleLane, naming the version found), and nothing is written."""
    version = store.load().version
    first = Group(version, [PutTicket(ticket("t1", 1))], T0 + 60, T0)
    assert store.prepare_group(first) is True
    assert _rows(path) == {}  # not committed yet
    assert store.commit_prepared(first) == version + 1
    assert _rows(path) == {"t1": ("queued", None, None, None)}
    with pytest.raises(StaleLane, match=f"at version {version + 1}, not {version}"):
        store.prepare_group(Group(version, [PutTicket(ticket("t2", 2))], None, T0))
    assert store.commit_group(Group(version + 1, [PutTicket(ticket("t2", 2))], None, T0)) == (
        version + 2
    )
    assert set(_rows(path)) == {"t1", "t2"}
