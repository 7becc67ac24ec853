"""Every lane in one PostgreSQL database (coordinator/store/postgres_storage.py): start
refuses an unmigrated database, the lane list and lookups, readiness, the alarm poller's
query, and a lost query session replaced — on a fresh database of the session's cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coordinator.errors import StoreError
from coordinator.store.postgres import PostgresLaneStore, migrate
from coordinator.store.postgres_storage import PostgresStorage
from tests.unit.kit import LANE, T0


@pytest.fixture
def storage(pg_dsn: str) -> Iterator[PostgresStorage]:
    migrate(pg_dsn)
    s = PostgresStorage(pg_dsn)
    s.start()
    yield s
    s.stop()


def _commit(storage: PostgresStorage, lane: str, deadline: float | None) -> None:
    store = storage.make_store(lane)
    assert isinstance(store, PostgresLaneStore)
    store.open()
    try:
        store.begin()
        store.finish(deadline, T0)
    finally:
        store.close()


def test_an_unmigrated_database_is_refused_at_start(pg_dsn: str) -> None:
    s = PostgresStorage(pg_dsn)
    try:
        with pytest.raises(StoreError, match="migrate"):
            s.start()
    finally:
        s.stop()


def test_lanes_are_the_lanes_rows(storage: PostgresStorage) -> None:
    assert storage.stored_lanes() == [] and not storage.has_lane(LANE)
    _commit(storage, LANE, T0 + 5)
    _commit(storage, "a:main", None)
    assert storage.stored_lanes() == ["a:main", LANE]
    assert storage.has_lane(LANE)
    assert storage.where(LANE) == {}
    assert storage.peek_deadline(LANE) == (True, None)  # the alarm poller reads deadlines
    assert storage.lanes_due(T0 + 4) == []
    assert storage.lanes_due(T0 + 5) == [LANE]


def test_a_reachable_database_is_ready(storage: PostgresStorage) -> None:
    assert storage.problem() is None
    assert storage.shared is True and storage.max_transactions


def test_an_unreachable_database_names_no_host_or_password(refused_port: int) -> None:
    s = PostgresStorage(f"postgresql://u:s3cret@127.0.0.1:{refused_port}/d")
    try:
        assert s.problem() == "the database is unreachable"
        with pytest.raises(StoreError) as info:
            s.stored_lanes()
        assert "s3cret" not in str(info.value)
        assert "s3cret" not in repr(s)
    finally:
        s.stop()


def test_a_lost_query_session_is_replaced_on_the_next_call(
    storage: PostgresStorage, pg_dsn: str
) -> None:
    _commit(storage, LANE, None)
    assert storage.has_lane(LANE)
    assert storage._query is not None
    storage._query.close()  # lost (the server restarted, the network dropped)
    assert storage.stored_lanes() == [LANE]
