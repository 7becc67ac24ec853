"""A lane transaction's statements in one libpq pipeline, sent with one flush.

psycopg's pipeline mode costs a cursor, a parameter dump through its adapters, a prepare
lookup and a socket write per statement, and a dictionary per row; on the lane
transaction's hot path (BEGIN and the lock; the writes, the version, the NOTIFY and COMMIT)
that was most of a replica's CPU per cycle (docs/performance.md). `Batch` speaks to the
session's libpq connection (`psycopg.Connection.pgconn`) directly instead: each statement is
prepared once per session under a name of its own (`lc_` and a hash of its text, never
psycopg's `_pg3_N`),
parameters go as text (None, bool, int, float, str: the types a lane's rows hold; the server
infers each one's type from where it stands), every statement and the Sync leave in one
write, and each statement's last result comes back raw for the caller to read the few values
it needs.

The session is left as psycopg knows it: out of pipeline mode, every result read, the
transaction status libpq reports. A statement the server refuses raises its psycopg error
class (DivisionByZero, LockNotAvailable, ...) once the pipeline is drained to its Sync, so
the session is still usable (in a failed transaction: the caller rolls back). Anything else
(the connection lost, an interrupt mid-way) closes the session: its state is unknown.
"""

from __future__ import annotations

import asyncio
import hashlib
import select
import weakref
from collections.abc import Generator, Sequence
from typing import Any

import psycopg
from psycopg import errors
from psycopg.pq import ExecStatus
from psycopg.pq.abc import PGconn, PGresult

from coordinator.store.postgres_db import Conn

PREFIX = "lc_"
_OK = (ExecStatus.TUPLES_OK, ExecStatus.COMMAND_OK)

# sql text -> (statement name, the same text with $1..$n for %s); one table per process
_converted: dict[str, tuple[bytes, bytes]] = {}
# the names each live session has prepared already
_prepared: weakref.WeakKeyDictionary[Conn, set[bytes]] = weakref.WeakKeyDictionary()


def _convert(query: str) -> tuple[bytes, bytes]:
    """The statement's name and its text with libpq placeholders (the queries given here use
    `%s` and no other `%`)."""
    found = _converted.get(query)
    if found is None:
        parts = query.split("%s")
        if any("%" in p for p in parts):
            raise ValueError(f"a batch statement may hold no '%' but its placeholders: {query!r}")
        text = "".join(f"{p}${i}" for i, p in enumerate(parts[:-1], 1)) + parts[-1]
        # named by its text, so that store threads converting at once agree on every name
        digest = hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
        found = (f"{PREFIX}{digest}".encode(), text.encode())
        _converted[query] = found
    return found


def _text(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return repr(value).encode()
    raise TypeError(f"a batch parameter is None, bool, int, float or str, not {type(value)}")


class Batch:
    """Statements queued by `execute` (the same call as a psycopg connection's, for
    coordinator/store/postgres_writes.py), sent and read by `run`."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self._queries: list[tuple[bytes | None, bytes, list[bytes | None]]] = []

    def execute(self, query: str, params: Sequence[Any] = ()) -> int:
        """Queue one statement; returns its index in `run`'s results. A statement without
        parameters (BEGIN, COMMIT) goes unprepared."""
        if params:
            name, text = _convert(query)
            self._queries.append((name, text, [_text(v) for v in params]))
        else:
            self._queries.append((None, query.encode(), []))
        return len(self._queries) - 1

    def run(self) -> list[PGresult | None]:
        """Send every queued statement and a Sync in one write; each statement's last result
        (None for one the server skipped after an earlier error). Raises the first error's
        psycopg class; psycopg.OperationalError when the session was lost (it is closed)."""
        done, fresh = self._send()
        try:
            results = _communicate(self._conn.pgconn)
            self._conn.pgconn.exit_pipeline_mode()
        except BaseException:
            self._lost()
            raise
        return self._results(results, done, fresh)

    async def run_here(self) -> list[PGresult | None]:
        """`run` on the event loop: the socket's readiness is awaited there (psycopg's
        sessions are non-blocking), no thread is held. A cancelled run closes the session."""
        done, fresh = self._send()
        try:
            results = await _communicate_here(self._conn.pgconn)
            self._conn.pgconn.exit_pipeline_mode()
        except BaseException:
            self._lost()
            raise
        return self._results(results, done, fresh)

    def _send(self) -> tuple[set[bytes], list[bytes]]:
        """Enter pipeline mode and queue every statement (a Parse first for each one this
        session has not prepared) and the Sync."""
        conn = self._conn
        pg = conn.pgconn
        done = _prepared.get(conn)
        if done is None:
            done = _prepared[conn] = set()
        fresh: list[bytes] = []
        try:
            pg.enter_pipeline_mode()
            for name, text, params in self._queries:
                if name is None:
                    pg.send_query_params(text, None)
                    continue
                if name not in done and name not in fresh:
                    pg.send_prepare(name, text)
                    fresh.append(name)
                pg.send_query_prepared(name, params)
            pg.pipeline_sync()
        except BaseException:
            self._lost()
            raise
        return done, fresh

    def _lost(self) -> None:
        _prepared.pop(self._conn, None)
        self._conn.close()  # mid-way: nobody knows what the session holds

    def _results(
        self, results: list[PGresult | None], done: set[bytes], fresh: list[bytes]
    ) -> list[PGresult | None]:
        conn = self._conn
        out: list[PGresult | None] = []
        first_error: PGresult | None = None
        for r in results:
            if r is not None and r.status == ExecStatus.FATAL_ERROR and first_error is None:
                first_error = r
        k = 0  # a fresh statement's Parse answers just before its first Execute
        seen: set[bytes] = set()
        for name, _, _ in self._queries:
            if name is not None and name in fresh and name not in seen:
                seen.add(name)
                parse = results[k]
                k += 1
                if parse is not None and parse.status == ExecStatus.COMMAND_OK:
                    done.add(name)
            out.append(results[k])
            k += 1
        if first_error is not None:
            raise errors.error_from_result(first_error, encoding=conn.info.encoding)
        return out


WRITE, READ = True, False  # what `_exchange` waits for: writable (or readable), readable


def _exchange(pg: PGconn) -> Generator[bool, None, list[PGresult | None]]:
    """Flush, then read every command's results up to the Sync; yields what to wait for on
    the socket whenever libpq would block (psycopg's sessions are non-blocking), and returns
    one entry per command sent: its last result, or None when the server skipped it
    (PIPELINE_ABORTED)."""
    while pg.flush():
        yield WRITE
        pg.consume_input()  # a full send buffer: read what the server answered meanwhile
    results: list[PGresult | None] = []
    current: PGresult | None = None
    while True:
        while pg.is_busy():
            yield READ
            pg.consume_input()
        r = pg.get_result()
        if r is None:  # the end of one command's results
            results.append(current)
            current = None
            continue
        status = r.status
        if status == ExecStatus.PIPELINE_SYNC:
            return results
        if status == ExecStatus.PIPELINE_ABORTED:
            continue
        current = r


def _communicate(pg: PGconn) -> list[PGresult | None]:
    """`_exchange`, its waits in `select` (a store thread)."""
    fd = pg.socket
    steps = _exchange(pg)
    try:
        while True:
            write = next(steps)
            select.select([fd], [fd] if write else [], [])
    except StopIteration as done:
        results: list[PGresult | None] = done.value
        return results


async def _wait(fd: int, *, write: bool) -> None:
    """Until `fd` is readable (or, with `write`, readable or writable) on the running loop."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    if write:
        loop.add_writer(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
        if write:
            loop.remove_writer(fd)


async def _communicate_here(pg: PGconn) -> list[PGresult | None]:
    """`_exchange`, its waits on the event loop."""
    fd = pg.socket
    steps = _exchange(pg)
    try:
        while True:
            await _wait(fd, write=next(steps))
    except StopIteration as done:
        results: list[PGresult | None] = done.value
        return results


def value(result: PGresult | None, col: int, row: int = 0) -> str | None:
    """One value of a result, as the server's text (None: SQL NULL)."""
    if result is None or result.status not in _OK:
        raise psycopg.InterfaceError("a batch statement has no rows to read")
    v = result.get_value(row, col)
    return None if v is None else v.decode()


def rows(result: PGresult | None) -> int:
    if result is None or result.status not in _OK:
        return 0
    return int(result.ntuples)
