"""Lane files on disk (coordinator/store/files.py): owner-only modes whatever the umask, raw
copies, temporary names, publishing without clobbering, header checks, failure reasons and
the data dir's write probe — on real files in tmp_path."""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.errors import StoreError
from coordinator.store.files import (
    READY_PROBE_NAME,
    TEMP_MARK,
    check_lane_header,
    copy_lane_file,
    data_dir_unwritable,
    failure_reason,
    is_empty_file,
    make_private_dir,
    make_private_file,
    open_failure_reason,
    publish_lane_file,
    remove_lane_file,
    temp_lane_path,
)


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0o000)
    yield
    os.umask(old)


def _mode(p: Path) -> int:
    return p.stat().st_mode & 0o777


def _db(path: Path, value: int) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (v INTEGER)")
    db.execute("INSERT INTO t VALUES (?)", (value,))
    db.commit()
    db.close()


def test_a_new_lane_file_is_owner_only_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "a.sqlite"
    make_private_file(path)
    assert path.stat().st_size == 0 and _mode(path) == 0o600


def test_an_existing_lane_file_and_its_side_files_are_tightened(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite"
    for p in (path, tmp_path / "a.sqlite-wal", tmp_path / "a.sqlite-shm"):
        p.write_bytes(b"x")
        p.chmod(0o644)
    make_private_file(path)
    assert _mode(path) == _mode(tmp_path / "a.sqlite-wal") == 0o600
    assert _mode(tmp_path / "a.sqlite-shm") == 0o600
    assert path.read_bytes() == b"x"  # never truncated


def test_a_new_directory_is_owner_only_an_existing_one_keeps_its_mode(
    tmp_path: Path, open_umask: None
) -> None:
    new = tmp_path / "x" / "data"
    make_private_dir(new)
    assert _mode(new) == 0o700
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    make_private_dir(mine)
    assert _mode(mine) == 0o755


def test_a_copy_of_a_lane_file_has_its_content_and_is_private(tmp_path: Path) -> None:
    src, dest = tmp_path / "src.sqlite", tmp_path / "copy.sqlite"
    _db(src, 42)
    copy_lane_file(src, dest)
    assert _mode(dest) == 0o600
    db = sqlite3.connect(dest)
    assert db.execute("SELECT v FROM t").fetchall() == [(42,)]
    db.close()


def test_a_copy_of_something_that_is_not_a_lane_file_is_a_store_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database at all, not even close" * 40)
    with pytest.raises(StoreError, match=r"bad\.sqlite: corrupt file \(file is not a database\)"):
        copy_lane_file(bad, tmp_path / "copy.sqlite")  # the server's own words


def test_a_copy_of_a_closed_wal_file_leaves_no_side_files(tmp_path: Path) -> None:
    src = tmp_path / "src.sqlite"
    db = sqlite3.connect(src)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (v)")
    db.execute("INSERT INTO t VALUES (7)")
    db.commit()
    db.close()  # the last connection checkpoints and removes -wal and -shm
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.sqlite"]
    copy_lane_file(src, tmp_path / "copy.sqlite")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.sqlite", "src.sqlite"]
    copy = sqlite3.connect(tmp_path / "copy.sqlite")
    assert copy.execute("SELECT v FROM t").fetchall() == [(7,)]
    copy.close()


def test_a_temporary_name_is_hidden_and_never_a_lane_name(tmp_path: Path) -> None:
    path = tmp_path / "solo%3Amain.sqlite"
    tmp = temp_lane_path(path)
    assert tmp.parent == tmp_path and tmp.name.startswith(".")
    assert TEMP_MARK in tmp.name and not tmp.name.endswith(".sqlite")
    assert temp_lane_path(path) != tmp


def test_remove_lane_file_removes_its_side_files_and_tolerates_missing_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.sqlite"
    for suffix in ("", "-wal", "-journal"):
        (tmp_path / f"a.sqlite{suffix}").write_bytes(b"x")
    (tmp_path / "other.sqlite").write_bytes(b"x")
    remove_lane_file(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite"]
    remove_lane_file(path)  # nothing left: no error


def test_is_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "full").write_bytes(b"x")
    assert is_empty_file(tmp_path / "empty")
    assert not is_empty_file(tmp_path / "full")
    assert not is_empty_file(tmp_path / "missing")
    assert not is_empty_file(tmp_path)  # a directory


def test_the_header_check_refuses_only_a_non_empty_non_sqlite_file(tmp_path: Path) -> None:
    good, empty, bad = tmp_path / "good", tmp_path / "empty", tmp_path / "bad"
    _db(good, 1)
    empty.write_bytes(b"")
    bad.write_bytes(b"hello, this is text")
    check_lane_header(good)
    check_lane_header(empty)
    with pytest.raises(StoreError) as info:
        check_lane_header(bad)
    assert info.value.reason == "corrupt file (file is not a database)"
    assert bad.read_bytes() == b"hello, this is text"  # untouched


def test_publish_takes_a_free_name_or_an_empty_file_never_one_with_content(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.sqlite"
    tmp = tmp_path / ".a.tmp"
    tmp.write_bytes(b"new")
    publish_lane_file(tmp, path)
    assert path.read_bytes() == b"new"

    empty_target = tmp_path / "b.sqlite"
    empty_target.write_bytes(b"")
    tmp_b = tmp_path / ".b.tmp"
    tmp_b.write_bytes(b"new-b")
    publish_lane_file(tmp_b, empty_target)
    assert empty_target.read_bytes() == b"new-b"

    theirs = tmp_path / "c.sqlite"
    theirs.write_bytes(b"theirs")
    tmp_c = tmp_path / ".c.tmp"
    tmp_c.write_bytes(b"mine")
    publish_lane_file(tmp_c, theirs)
    assert theirs.read_bytes() == b"theirs"  # another process's lane file wins


def test_failure_reasons_name_the_cause() -> None:
    assert failure_reason(None) is None
    assert open_failure_reason(OSError(errno.ENOSPC, "full")) == "ENOSPC"
    assert open_failure_reason(OSError(errno.EMFILE, "too many")) == "EMFILE"
    corrupt = sqlite3.DatabaseError("file is not a database")
    assert open_failure_reason(corrupt) == "corrupt file (file is not a database)"
    assert open_failure_reason(sqlite3.OperationalError("database or disk is full")) == "ENOSPC"
    assert open_failure_reason(StoreError("x", reason="edited migration")) == "edited migration"
    try:
        try:
            raise OSError(errno.EACCES, "denied")
        except OSError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert failure_reason(outer) == "EACCES"  # the cause, found down the chain
    assert open_failure_reason(ValueError("odd")) == "ValueError"


def test_the_data_dir_probe_writes_for_real(tmp_path: Path) -> None:
    assert data_dir_unwritable(tmp_path) is None
    assert not (tmp_path / READY_PROBE_NAME).exists()  # removed again
    reason = data_dir_unwritable(tmp_path / "missing")
    assert reason is not None and reason.startswith("data dir not writable")
