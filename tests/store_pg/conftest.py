"""`stores` / `store`: the same test on both lane stores (SQLite on tmp_path, PostgreSQL on
a fresh database of the session's cluster); `pg_stores` / `pg_store`: PostgreSQL only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store_pg.kit import KINDS, AnyStore, Stores, make_stores, postgres_stores


@pytest.fixture(params=KINDS)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    yield from make_stores(request.param, request, tmp_path)


@pytest.fixture
def store(stores: Stores) -> AnyStore:
    return stores.new()


@pytest.fixture
def pg_stores(pg_dsn: str) -> Iterator[Stores]:
    stores = postgres_stores(pg_dsn)
    yield stores
    stores.close_all()


@pytest.fixture
def pg_store(pg_stores: Stores) -> AnyStore:
    return pg_stores.new()
