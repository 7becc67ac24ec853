"""Choosing the store (coordinator/store/storage.py): `open_storage` for "sqlite" or a
PostgreSQL URL, and the refusals (no password ever repeated)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.errors import ConfigError
from coordinator.store.postgres_storage import PostgresStorage
from coordinator.store.sqlite_storage import SqliteStorage
from coordinator.store.storage import open_storage, postgres_url


@pytest.mark.parametrize("url", [None, "sqlite"])
def test_the_default_store_is_lane_files_in_the_data_dir(url: str | None, tmp_path: Path) -> None:
    storage = open_storage(url, tmp_path)
    assert isinstance(storage, SqliteStorage)
    assert storage.data_dir == tmp_path and storage.shared is False


def test_sqlite_without_a_data_dir_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs --data-dir"):
        open_storage(None, None)


@pytest.mark.parametrize("scheme", ["postgresql://", "postgres://"])
def test_a_postgresql_url_is_the_shared_store(scheme: str) -> None:
    url = scheme + "u:secret@127.0.0.1:1/db"
    storage = open_storage(url, None)  # nothing connects before start()
    try:
        assert isinstance(storage, PostgresStorage)
        assert storage.shared is True and storage.dsn == url
    finally:
        storage.stop()


def test_another_url_is_refused_without_repeating_it() -> None:
    with pytest.raises(ConfigError) as info:
        open_storage("mysql://u:secret@h/db", Path("/nonexistent"))
    assert "secret" not in str(info.value)
    assert "postgresql://" in str(info.value)


def test_postgres_url() -> None:
    assert postgres_url("postgresql://h/db") == "postgresql://h/db"
    assert postgres_url("postgres://h/db") == "postgres://h/db"
    assert postgres_url("sqlite") is None and postgres_url(None) is None
    with pytest.raises(ConfigError):
        postgres_url("http://postgresql://")
