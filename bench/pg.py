"""Shape 9: the coordinator on PostgreSQL beside SQLite, in the same run. A throwaway cluster
(tests/harness/postgres.py: initdb in a temp dir, as the `postgres` OS user when root) with
fsync turned back on (the test cluster runs without it; BENCH_PG_FSYNC=0 keeps it off), one
database, `lane-coordinator migrate`; then one replica for the throughput shapes (against the
bare handler, like SQLite's) and a second one on the same database for the cross-replica
hand-off: hold on replica 1, park the waiter's await on replica 2, release on replica 1.

No PostgreSQL (no initdb, or it fails to start): the rows print "SKIPPED: reason"."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from bench.common import pct
from bench.context import Context
from bench.latency import handoff
from bench.load import compare, lanes
from bench.report import num
from bench.run import FLOORS, HANDOFF_P99_MS, cycles_result, latency
from bench.servers import migrate, running, start_coordinator
from bench.settings import Settings

if TYPE_CHECKING:
    from tests.harness.postgres import PostgresCluster

DATABASE = "lane_bench"
CROSS_PARK_SECONDS = 0.05  # the waiter's await parks on replica 2 (a lane transaction there)


def rows(s: Settings) -> list[tuple[str, str, str]]:
    fsync = "fsync on" if s.pg_fsync else "fsync OFF"
    return [
        ("9a", f"PostgreSQL ({fsync}), 1 lane × 16 clients", f"≥ {FLOORS['2']:g}× bare"),
        ("9b", f"PostgreSQL ({fsync}), 100 lanes × 1 client", f"≥ {FLOORS['1']:g}× bare"),
        ("9c", "PostgreSQL, cross-replica hand-off", f"p99 < {HANDOFF_P99_MS:g} ms"),
    ]


def start_cluster(fsync: bool) -> PostgresCluster:
    from tests.harness.postgres import PostgresCluster

    cluster = PostgresCluster.start_new(database=DATABASE)
    if fsync:
        try:
            cluster.psql("ALTER SYSTEM SET fsync = on", database="postgres")
            cluster.psql("SELECT pg_reload_conf()", database="postgres")
        except BaseException:
            cluster.close()
            raise
    return cluster


def _beside(ctx: Context, key: str) -> str:
    """'; SQLite 1,234/s' when that shape ran on SQLite earlier in this run."""
    sqlite = ctx.figures.get(key)
    return f"; SQLite {num(sqlite.per_second)}/s" if sqlite is not None else ""


async def shape9(ctx: Context) -> None:
    (ka, sa, ta), (kb, sb, tb), (kc, sc, tc) = rows(ctx.s)
    if not ctx.s.pg:
        for key, shape, target in rows(ctx.s):
            ctx.report.skipped(key, shape, target, "BENCH_PG=0")
        return
    try:
        cluster = await asyncio.to_thread(start_cluster, ctx.s.pg_fsync)
    except Exception as exc:  # no initdb (PostgresUnavailable), a failed start, no psql...
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        for key, shape, target in rows(ctx.s):
            ctx.report.skipped(key, shape, target, reason)
        return
    try:
        await asyncio.to_thread(migrate, ctx.tmp, cluster.dsn)
        cfg = ctx.config("pg")
        with running(start_coordinator(ctx.tmp, "pg-1", cfg, store=cluster.dsn)) as r1:
            bare, pg = await compare(
                ctx.bare(), r1, lanes("pg1x16", 1), 16, ctx.s.seconds, ctx.s.rounds
            )
            result = cycles_result(bare, pg) + _beside(ctx, "2")
            ctx.report.row(ka, sa, result, ta, pg.per_second / bare.per_second >= FLOORS["2"])
            bare, pg = await compare(
                ctx.bare(), r1, lanes("pg100x1", 100), 1, ctx.s.seconds, ctx.s.rounds
            )
            result = cycles_result(bare, pg) + _beside(ctx, "1a")
            ok = pg.per_second / bare.per_second >= FLOORS["1"]
            ctx.report.row(kb, sb, result, tb, ok)
            with running(start_coordinator(ctx.tmp, "pg-2", cfg, store=cluster.dsn)) as r2:
                gaps = await handoff(
                    r1.url, r2.url, "bench:cross", ctx.s.handoff_samples, CROSS_PARK_SECONDS
                )
            ctx.report.row(kc, sc, latency(gaps), tc, pct(gaps, 99) < HANDOFF_P99_MS)
    finally:
        await asyncio.to_thread(cluster.close)
