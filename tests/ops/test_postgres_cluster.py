"""The throwaway PostgreSQL cluster the PostgreSQL tests rely on (tests/harness/postgres.py,
the `postgres` and `pg_dsn` fixtures of tests/conftest.py): its settings, a fresh database per
test, and committed rows surviving a restart (fast and immediate) and a kill -9 of the
postmaster (crash recovery on the next start), reached with asyncpg as the store will be."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tests.harness.postgres import PostgresCluster, StopMode

# what a client sees when the server goes away under it
GONE = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


async def committed(dsn: str) -> list[int]:
    """The rows of table t, on a new connection."""
    conn: Any = await asyncpg.connect(dsn)
    try:
        return [int(r["n"]) for r in await conn.fetch("SELECT n FROM t ORDER BY n")]
    finally:
        await conn.close()


async def table_with_rows(dsn: str, *rows: int) -> Any:
    """Create table t, commit `rows` (each its own transaction); returns the open connection."""
    conn: Any = await asyncpg.connect(dsn)
    await conn.execute("CREATE TABLE t (n integer PRIMARY KEY)")
    for n in rows:
        await conn.execute("INSERT INTO t VALUES ($1)", n)
    return conn


async def test_settings_the_store_relies_on(postgres: PostgresCluster, pg_dsn: str) -> None:
    assert pg_dsn.startswith(f"postgresql://postgres@127.0.0.1:{postgres.port}/")
    conn: Any = await asyncpg.connect(pg_dsn)
    try:
        names = ("synchronous_commit", "fsync", "listen_addresses", "max_connections")
        shown = {name: str(await conn.fetchval(f"SHOW {name}")) for name in names}
        superuser = await conn.fetchval(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
        )
        tables = int(
            await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        )
    finally:
        await conn.close()
    assert shown == {
        "synchronous_commit": "on",  # the product relies on it
        "fsync": "off",  # test speed only
        "listen_addresses": "127.0.0.1",
        "max_connections": "100",
    }
    assert superuser is True
    assert tables == 0  # a fresh database


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_committed_rows_survive_a_restart(
    postgres: PostgresCluster, pg_dsn: str, mode: StopMode
) -> None:
    conn = await table_with_rows(pg_dsn, 1, 2, 3)
    port = postgres.port
    postgres.restart(mode)
    assert postgres.running() and postgres.port == port  # the same DSN reaches it again
    with pytest.raises(GONE):
        await conn.fetchval("SELECT 1")
    conn.terminate()
    assert await committed(pg_dsn) == [1, 2, 3]


async def test_kill9_then_start_recovers(postgres: PostgresCluster, pg_dsn: str) -> None:
    conn = await table_with_rows(pg_dsn, 1, 2)
    tx = conn.transaction()
    await tx.start()
    await conn.execute("INSERT INTO t VALUES (99)")  # never committed
    log_before = postgres.log_file.stat().st_size

    pid = postgres.kill9()
    assert not postgres.running()
    with pytest.raises(GONE):
        await conn.fetchval("SELECT 1")
    conn.terminate()

    postgres.restart()  # down: just starts, on the same port
    assert postgres.running() and postgres.postmaster_pid() != pid
    with postgres.log_file.open(errors="replace") as log:
        log.seek(log_before)
        assert "automatic recovery in progress" in log.read()
    assert await committed(pg_dsn) == [1, 2]  # committed rows kept, the open transaction gone
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("INSERT INTO t VALUES (3)")
    finally:
        await conn.close()
    assert await committed(pg_dsn) == [1, 2, 3]


def test_fresh_database_is_empty_and_isolated(postgres: PostgresCluster) -> None:
    postgres.start()
    count = "SELECT count(*) FROM pg_tables WHERE tablename = 'only_a'"
    a = postgres.fresh_database("iso_a")
    postgres.fresh_database("iso_b")
    assert a == f"postgresql://postgres@127.0.0.1:{postgres.port}/iso_a"
    postgres.psql("CREATE TABLE only_a (x integer)", database="iso_a")
    assert postgres.psql(count, database="iso_a").strip() == "1"
    assert postgres.psql(count, database="iso_b").strip() == "0"
    postgres.fresh_database("iso_a")  # again: dropped, created empty
    assert postgres.psql(count, database="iso_a").strip() == "0"
    for name in ("iso_a", "iso_b"):
        postgres.drop_database(name)
