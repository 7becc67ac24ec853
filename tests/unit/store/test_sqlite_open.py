"""Opening and peeking lane files cheaply: the startup peek of a cleanly closed lane leaves no
side files and a lane with WAL content is read with it; reopening a current lane file runs
no write transaction (so another connection's write lock does not stall it), while an edited
or missing migration still goes through the migrations runner."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from coordinator.errors import StoreError
from coordinator.store.sqlite import SqliteLaneStore
from tests.unit.kit import LANE, T0


def _make(path: Path, deadline: float | None) -> SqliteLaneStore:
    s = SqliteLaneStore(path, LANE)
    s.open()
    s.begin()
    s.finish(deadline, T0)
    return s


def test_peek_of_a_closed_lane_reads_its_deadline_and_leaves_no_side_files(
    tmp_path: Path,
) -> None:
    path = tmp_path / "lane.sqlite"
    _make(path, T0 + 30).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lane.sqlite"]
    assert SqliteLaneStore.peek_deadline(path) == (True, T0 + 30)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lane.sqlite"]


def test_peek_of_a_lane_with_wal_content_reads_the_wal(tmp_path: Path) -> None:
    """A crash leaves committed changes in the WAL only: the peek must see them."""
    path = tmp_path / "lane.sqlite"
    s = _make(path, T0 + 30)  # left open: its commit is in the -wal, not the main file
    try:
        assert (tmp_path / "lane.sqlite-wal").stat().st_size > 0
        assert SqliteLaneStore.peek_deadline(path) == (True, T0 + 30)
    finally:
        s.close()


def test_peek_of_a_file_that_cannot_tell_is_unknown(tmp_path: Path) -> None:
    path = tmp_path / "lane.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    assert SqliteLaneStore.peek_deadline(path) == (False, None)


def test_reopening_a_current_lane_takes_no_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "lane.sqlite"
    _make(path, None).close()
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
        s = SqliteLaneStore(path, LANE, busy_timeout_ms=0)
        s.open()  # nothing to migrate: no write transaction to wait for
        assert s.load().version == 1
        s.close()
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_an_edited_migration_is_still_refused_at_reopen(tmp_path: Path) -> None:
    path = tmp_path / "lane.sqlite"
    _make(path, None).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_migrations SET sha256 = 'edited' WHERE version = 2")
    db.commit()
    db.close()
    s = SqliteLaneStore(path, LANE)
    with pytest.raises(StoreError) as exc:
        s.open()
    assert "edited" in exc.value.message
