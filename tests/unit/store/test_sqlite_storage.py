"""The default store (coordinator/store/sqlite_storage.py): one lane file per lane under the
data dir, one server per data dir — start, stop, the lane list, the deadline peek and index,
on a real data dir in tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.engine.model import PutCounters
from coordinator.errors import ConfigError
from coordinator.store.deadline_index import INDEX_NAME
from coordinator.store.sqlite import SqliteLaneStore
from coordinator.store.sqlite_storage import SqliteStorage
from tests.unit.kit import T0


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def storage(data: Path) -> Iterator[SqliteStorage]:
    s = SqliteStorage(data)
    s.start()
    yield s
    s.stop()


def _lane(storage: SqliteStorage, lane: str, deadline: float | None = None) -> None:
    """A lane file with one finished transaction (its next deadline recorded)."""
    store = storage.make_store(lane)
    assert isinstance(store, SqliteLaneStore)
    store.open()
    try:
        store.begin()
        store.apply([PutCounters(0, 2)])
        store.finish(deadline, T0)
    finally:
        store.close()


def test_start_makes_a_private_data_dir(storage: SqliteStorage, data: Path) -> None:
    assert data.is_dir() and data.stat().st_mode & 0o777 == 0o700
    assert storage.problem() is None
    assert storage.stored_lanes() == []


def test_a_data_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="is not a directory"):
        SqliteStorage(tmp_path / "f").start()


def test_a_second_server_on_the_data_dir_is_refused(storage: SqliteStorage, data: Path) -> None:
    with pytest.raises(ConfigError, match="in use"):
        SqliteStorage(data).start()


def test_lanes_are_the_lane_files_not_empty_files_or_others(
    storage: SqliteStorage, data: Path
) -> None:
    _lane(storage, "solo:main")
    _lane(storage, "duo:main")
    storage.path_for("free:main").write_bytes(b"")  # an older version's failed first open
    (data / "notes.txt").write_text("x")
    assert storage.stored_lanes() == ["duo:main", "solo:main"]
    assert storage.has_lane("solo:main")
    assert not storage.has_lane("free:main") and not storage.has_lane("other:main")
    assert storage.where("solo:main") == {"file": storage.path_for("solo:main").name}
    assert storage.lanes_due(T0 + 10**9) == []  # never shared: no alarm poller


def test_a_temp_file_left_by_a_crash_is_removed_at_start(data: Path) -> None:
    data.mkdir(mode=0o700)
    left = data / ".solo%3Amain.sqlite.tmp-123-abcd"
    left.write_bytes(b"half a lane")
    kept = data / ".hidden"
    kept.write_bytes(b"x")
    s = SqliteStorage(data)
    s.start()
    try:
        assert not left.exists() and kept.exists()
    finally:
        s.stop()


def test_a_lane_deadline_is_peeked_and_indexed_at_a_clean_stop(data: Path) -> None:
    s = SqliteStorage(data)
    s.start()
    _lane(s, "solo:main", deadline=T0 + 5)
    _lane(s, "duo:main", deadline=None)
    assert s.peek_deadline("solo:main") == (True, T0 + 5)
    assert s.peek_deadline("duo:main") == (True, None)
    s.stop()
    assert (data / INDEX_NAME).is_file()
    again = SqliteStorage(data)
    again.start()  # the lock was released at stop
    try:
        assert again.peek_deadline("solo:main") == (True, T0 + 5)
    finally:
        again.stop()


def test_a_stop_with_no_lane_writes_no_index(storage: SqliteStorage, data: Path) -> None:
    storage.stop()
    assert not (data / INDEX_NAME).exists()
    storage.start()  # the fixture stops it again
