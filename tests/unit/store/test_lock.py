"""The data dir's lock (coordinator/store/lock.py): one coordinator per data dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.errors import ConfigError
from coordinator.store.lock import LOCK_NAME, DataDirLock


def test_the_lock_file_names_its_holder(tmp_path: Path) -> None:
    lock = DataDirLock(tmp_path)
    lock.acquire()
    try:
        text = (tmp_path / LOCK_NAME).read_text()
        assert text.strip().isdigit() and int(text) > 0
        assert (tmp_path / LOCK_NAME).stat().st_mode & 0o777 == 0o600
    finally:
        lock.release()


def test_a_second_lock_on_the_data_dir_is_refused_until_the_first_is_released(
    tmp_path: Path,
) -> None:
    first, second = DataDirLock(tmp_path), DataDirLock(tmp_path)
    first.acquire()
    with pytest.raises(ConfigError, match="in use by another lane-coordinator"):
        second.acquire()
    first.release()
    second.acquire()  # the kernel let go of the first lock
    second.release()


def test_release_twice_or_without_acquire_is_harmless(tmp_path: Path) -> None:
    lock = DataDirLock(tmp_path)
    lock.release()
    lock.acquire()
    lock.release()
    lock.release()
    DataDirLock(tmp_path).acquire()  # nothing left held
