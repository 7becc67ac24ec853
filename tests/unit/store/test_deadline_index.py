"""The deadline index (coordinator/store/deadline_index.py) written at a clean stop: the next
start takes each lane's deadline from it without reading the lane file — but only while the
file is exactly the one the entry was written for; a changed, copied or WAL-backed file, or
a torn index, is read as before. The start leaves the index in place (deleting it would free
space on a full disk); the next clean stop replaces it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from coordinator.protocol.names import lane_file_name
from coordinator.store.deadline_index import INDEX_NAME, DeadlineIndex
from coordinator.store.sqlite import SqliteLaneStore
from coordinator.store.sqlite_storage import SqliteStorage
from tests.unit.kit import T0

LANES = {"solo:a": T0 + 30, "solo:b": None, "solo:c": T0 + 90}


def _populate(data: Path) -> None:
    for lane, deadline in LANES.items():
        s = SqliteLaneStore(data / lane_file_name(lane), lane)
        s.open()
        s.begin()
        s.finish(deadline, T0)
        s.close()


def _started(data: Path) -> SqliteStorage:
    storage = SqliteStorage(data)
    storage.start()
    return storage


def _file_reads_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Path) -> tuple[bool, float | None]:
        raise AssertionError(f"{path.name} was read")

    monkeypatch.setattr(SqliteLaneStore, "peek_deadline", staticmethod(refuse))


@pytest.fixture
def data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    first = _started(data)
    _populate(data)
    first.stop()  # a clean stop: writes the index
    assert (data / INDEX_NAME).is_file()
    return data


def test_after_a_clean_stop_deadlines_come_from_the_index_without_reading_a_file(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = _started(data)
    try:
        assert (data / INDEX_NAME).is_file()  # left in place: a start frees no space
        _file_reads_fail(monkeypatch)
        assert {lane: storage.peek_deadline(lane) for lane in LANES} == {
            lane: (True, d) for lane, d in LANES.items()
        }
    finally:
        storage.stop()


def test_a_lane_file_changed_since_the_stop_is_read_again(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = data / lane_file_name("solo:a")
    s = SqliteLaneStore(path, "solo:a")
    s.open()
    s.begin()
    s.finish(T0 + 500, T0 + 1)  # a new deadline, written after the index
    s.close()
    storage = _started(data)
    try:
        assert storage.peek_deadline("solo:a") == (True, T0 + 500)
    finally:
        storage.stop()


@pytest.mark.parametrize("how", ["touched", "restored from a copy", "WAL content beside it"])
def test_only_the_exact_file_an_entry_was_written_for_counts(data: Path, how: str) -> None:
    path = data / lane_file_name("solo:c")
    other = data.parent / "copy.sqlite"
    if how == "touched":
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))  # same times
    elif how == "restored from a copy":
        shutil.copy2(path, other)  # the same bytes and mtime, another file
        os.replace(other, path)
    else:
        (data / (path.name + "-wal")).write_bytes(b"\0" * 32)
    index = DeadlineIndex.read(data)
    assert len(index) == len(LANES)
    assert index.deadline("solo:c", path) == (False, None)
    assert index.deadline("solo:a", data / lane_file_name("solo:a")) == (True, T0 + 30)


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"format": 99, "lanes": {}}', b"[1]"])
def test_a_torn_or_foreign_index_is_no_index(data: Path, content: bytes) -> None:
    (data / INDEX_NAME).write_bytes(content)
    storage = _started(data)
    try:
        assert storage.peek_deadline("solo:a") == (True, T0 + 30)  # read from the file
    finally:
        storage.stop()


def test_the_stop_reuses_unchanged_entries_and_the_next_start_finds_them(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = _started(data)
    _file_reads_fail(monkeypatch)  # nothing changed: the stop reads no lane file either
    storage.stop()
    again = _started(data)
    try:
        assert again.peek_deadline("solo:c") == (True, T0 + 90)
    finally:
        again.stop()


def test_after_a_crash_the_earlier_index_still_gives_only_untouched_lanes(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that wrote one lane and then crashed (no stop): the next start reads that lane's
    file and takes the untouched lanes' deadlines from the earlier index."""
    run = _started(data)
    path = data / lane_file_name("solo:c")
    s = SqliteLaneStore(path, "solo:c")
    s.open()
    s.begin()
    s.finish(T0 + 700, T0 + 2)
    s.close()
    run._lock.release()  # the crash: no stop, so no new index
    after = _started(data)
    try:
        assert after.peek_deadline("solo:c") == (True, T0 + 700)  # its file, read
        _file_reads_fail(monkeypatch)
        assert after.peek_deadline("solo:a") == (True, T0 + 30)  # the index
    finally:
        monkeypatch.undo()  # the stop reads solo:c again (changed since the index)
        after.stop()
