"""The LISTEN session of one replica: hears which lanes another replica changed in a way that
may wake a parked await (a release, a promotion, a pause), and says when it (re)connected.

It is a session of its own (never from the pool, never through a transaction pooler: LISTEN
needs one backend for the whole session). While quiet it is checked every
LISTEN_HEALTH_SECONDS; a lost session is opened again every LISTEN_RETRY_SECONDS. A
notification sent while it was disconnected is lost, so every (re)connection calls
`on_connected`: the registry wakes every parked await, which then reads the lane afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import psycopg
import structlog
from psycopg import sql

from coordinator.constants import LISTEN_HEALTH_SECONDS, LISTEN_RETRY_SECONDS
from coordinator.logs import RateLimitedLog
from coordinator.store.postgres_db import (
    CONNECT_TIMEOUT_SECONDS,
    DEFAULT_STALL,
    NOTIFY_CHANNEL,
    TCP_REFUSED,
    StallBudget,
)

log = structlog.get_logger("coordinator.listen")


async def listen_forever(
    dsn: str,
    on_lane: Callable[[str], None],
    on_connected: Callable[[], None],
    *,
    health_seconds: float = LISTEN_HEALTH_SECONDS,
    retry_seconds: float = LISTEN_RETRY_SECONDS,
    ours: Callable[[int], bool] = lambda pid: False,
    stall: StallBudget = DEFAULT_STALL,
) -> None:
    """Runs until cancelled. A notification `ours` says this replica sent (the server
    process that sent it is one of its own sessions) is skipped: the commit that sent it
    already woke this replica's awaits. The session gets the timeouts and TCP keepalives of
    `stall`, like every other session of the replica (a cut-off one dies, and is opened
    again)."""
    lost = RateLimitedLog("listen.lost")
    while True:
        conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        try:
            conn = await psycopg.AsyncConnection.connect(
                stall.conninfo(dsn),
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                application_name="lane-coordinator-listen",
            )
            await conn.execute(stall.timeouts_sql(conn.info.server_version))
            with contextlib.suppress(*TCP_REFUSED):
                await conn.execute(stall.tcp_sql())
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
            log.info("listen.connected")
            on_connected()
            while True:
                async for note in conn.notifies(timeout=health_seconds):
                    if not ours(note.pid):
                        on_lane(note.payload)
                # quiet (or busy) for health_seconds: is the session still there?
                await asyncio.wait_for(conn.execute("SELECT 1"), timeout=health_seconds)
        except asyncio.CancelledError:
            raise
        except (psycopg.Error, OSError, TimeoutError) as exc:
            lost(error=type(exc).__name__, hint="parked awaits re-check on a timer meanwhile")
        finally:
            if conn is not None:
                with contextlib.suppress(psycopg.Error, OSError):
                    await conn.close()
        await asyncio.sleep(retry_seconds)
