"""The one throwaway PostgreSQL cluster of a peer-table run (bench/pg.py's: fsync back on,
synchronous_commit on), shared by ours on PostgreSQL (database lane_bench, migrated, replicas
started on demand) and the plain-PostgreSQL recipe (database peer_plain). Its
max_connections is raised to 300 (a restart): the recipe's 100 clients hold a session each
while our replicas keep their pools. No PostgreSQL: every user of it is Unavailable."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from bench.peers.base import Unavailable, process_tree
from bench.pg import start_cluster
from bench.servers import ServerProcess, migrate, start_coordinator, write_config

if TYPE_CHECKING:
    from tests.harness.postgres import PostgresCluster

OURS_DATABASE = "lane_bench"  # bench/pg.py's start_cluster creates it
PLAIN_DATABASE = "peer_plain"
MAX_CONNECTIONS = 300


def _reason(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


class SharedPostgres:
    def __init__(self, fsync: bool) -> None:
        self.fsync = fsync
        self._cluster: PostgresCluster | None = None
        self._failed: str | None = None
        self._lock = asyncio.Lock()
        self._migrated = False
        self._plain = False
        self.replicas: list[ServerProcess] = []

    def _start(self) -> PostgresCluster:
        cluster = start_cluster(self.fsync)
        try:
            cluster.psql(f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS}", "postgres")
            cluster.restart()
        except BaseException:
            cluster.close()
            raise
        return cluster

    async def cluster(self) -> PostgresCluster:
        """The running cluster (started on first use); Unavailable when it cannot start."""
        async with self._lock:
            if self._failed is not None:
                raise Unavailable(self._failed)
            if self._cluster is None:
                try:
                    self._cluster = await asyncio.to_thread(self._start)
                except Exception as exc:  # no initdb (PostgresUnavailable), a failed start...
                    self._failed = f"no PostgreSQL: {_reason(exc)}"
                    raise Unavailable(self._failed) from exc
            return self._cluster

    async def plain_dsn(self) -> str:
        """The recipe's database (created on first use)."""
        cluster = await self.cluster()
        if not self._plain:
            await asyncio.to_thread(cluster.fresh_database, PLAIN_DATABASE)
            self._plain = True
        return cluster.dsn_for(PLAIN_DATABASE)

    async def ours(self, tmp: Path, n: int) -> list[ServerProcess]:
        """The first n replicas of ours on lane_bench (migrated, started on first use)."""
        cluster = await self.cluster()
        async with self._lock:
            if not self._migrated:
                await asyncio.to_thread(migrate, tmp, cluster.dsn)
                self._migrated = True
            config = write_config(tmp / "peer-pg.toml", max_lanes=5000, max_connections=4000)
            while len(self.replicas) < n:
                name = f"peer-pg-{len(self.replicas) + 1}"
                srv = await asyncio.to_thread(
                    start_coordinator, tmp, name, config, store=cluster.dsn
                )
                self.replicas.append(srv)
        return self.replicas[:n]

    def pids(self) -> list[int]:
        """The postmaster and its backends (empty before the start)."""
        pid = self._cluster.postmaster_pid() if self._cluster is not None else None
        return process_tree(pid) if pid is not None else []

    async def close(self) -> None:
        for srv in reversed(self.replicas):
            await asyncio.to_thread(srv.stop)
        self.replicas = []
        if self._cluster is not None:
            await asyncio.to_thread(self._cluster.close)
            self._cluster = None
