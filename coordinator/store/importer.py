"""`lane-coordinator import --from DATA_DIR --store URL`: every lane file of a SQLite data dir
copied, complete, into the PostgreSQL database that replicas serve, so that a replica answers
for each lane exactly as the SQLite server did: the same tickets (live and the whole render
log), receipts (payloads, verdicts, their order), incidents (with their ids), pause, projects
served and machines seen; fences, sequence numbers and incident ids continue where the file
stopped; the lane's version, next deadline and last `now` are kept.

The rules (docs/operator.md "Moving from SQLite to PostgreSQL"; docs/decisions.md):

- The SQLite server must be stopped. The data dir's lock (lock.py) is held for the whole run
  and refused (ConfigError) while a server holds it: a server still serving after a lane was
  copied would grant leases the database never sees, and a replica would hand the same
  fences out again.
- The database must be migrated already (`schema_status`, StoreError otherwise): the import
  never creates or changes a schema, so a mistyped URL is refused rather than given tables.
  Both checks come before any lane is read or written.
- A lane file is never written, nor opened by SQLite: its bytes (with its -wal or -journal)
  are copied into a private scratch directory, one consistent state since the lock keeps
  every writer out; opening the copy recovers it as SQLite recovers a file after a crash,
  exactly what the server would have served. (Not the backup API: any SQLite connection to a
  WAL file, a read-only one too, leaves -wal and -shm files in the data dir.) The copy is
  checked (integrity_check, known migrations), migrated to the current lane schema (an older
  file imports as the server would serve it) and read in one transaction.
- Each lane is written in ONE PostgreSQL transaction under its `lanes` row lock (a replica
  already serving the lane makes it wait, then it is reported busy). A lane the database
  already holds is refused, never merged, unless it is empty (no ticket, receipt, incident,
  project or pause, counters at their start); a re-run refuses every lane it imported before
  and writes nothing to them. Counts are checked before COMMIT.
- A lane that cannot be imported (corrupt or unreadable file, newer schema, a table or meta
  key this code does not know, a lane refused, busy or failing in the database) is reported
  with its reason and skipped; the others are still imported. A 0-byte file (the server
  ignores it: the lane has no file yet) is reported as ignored.

Rows go through the stores' shared code: tickets, receipts, the pause, projects served,
machines seen and the counters as engine Changes (rows.py mapping,
postgres_writes.write_changes); receipts in rowid order (their `id` then orders receipts
stored in the same second as rowid did). Incidents keep their ids and their detail text byte
for byte; `lanes.last_incident` takes SQLite's AUTOINCREMENT counter (sqlite_sequence), so
new ids continue after it. Version, next_deadline and last_now come from `lane_head` (an
empty lane a replica already knew gets a version above the one it had, so a replica that
cached it reloads).
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from coordinator.engine.model import (
    Change,
    PutCounters,
    PutMachineSeen,
    PutPause,
    PutProjectServed,
    PutReceipt,
    PutTicket,
)
from coordinator.errors import ConfigError, StoreError
from coordinator.protocol.names import LANE_RE, lane_file_name, lane_from_file_name
from coordinator.store.files import (
    check_lane_header,
    is_empty_file,
    make_private_file,
    open_failure_reason,
    remove_lane_file,
)
from coordinator.store.lock import DataDirLock
from coordinator.store.migrate import migrations as lane_migrations
from coordinator.store.postgres_db import Conn, connect, redact_dsn, schema_status
from coordinator.store.postgres_writes import write_changes
from coordinator.store.rows import (
    INCIDENT_COLUMNS,
    PAUSE_COLUMNS,
    RECEIPT_COLUMNS,
    TICKET_COLUMNS,
    Row,
    pause_from_row,
    receipt_from_row,
    ticket_from_row,
)
from coordinator.store.sqlite import SqliteLaneStore

BATCH = 500  # rows per pipelined round trip
# Every table a lane file holds (migrations 0001..0004), and where it goes: meta -> lanes
# (last_fence, next_seq; `lane` is the key), lane_head -> lanes (version, next_deadline,
# last_now), sqlite_sequence -> lanes.last_incident, schema_migrations: the file's own.
LANE_TABLES = frozenset(
    {"meta", "tickets", "projects", "pause", "receipts", "incidents", "lane_head", "machines_seen"}
    | {"schema_migrations", "sqlite_sequence"}
)
META_KEYS = frozenset({"lane", "last_fence", "next_seq"})
COUNTED = ("tickets", "receipts", "incidents", "projects", "pause", "machines_seen")  # report order
_PG_TABLE = {"pause": "pauses"}  # PostgreSQL's name where it differs
_LABEL = {"machines_seen": "machines seen"}


@dataclass(frozen=True)
class LaneImported:
    """A lane written to the database: rows per table (`COUNTED`), and its counters."""

    lane: str
    rows: dict[str, int]
    live: int
    version: int
    last_fence: int

    def line(self) -> str:
        counts = ", ".join(f"{self.rows[t]} {_LABEL.get(t, t)}" for t in COUNTED)
        return (
            f"{self.lane}: imported ({counts}; {self.live} live; version {self.version}, "
            f"last fence {self.last_fence})"
        )


@dataclass(frozen=True)
class LaneSkipped:
    """A lane not imported and why; `benign`: nothing to import (a 0-byte file)."""

    lane: str
    reason: str
    benign: bool = False

    def line(self) -> str:
        return f"{self.lane}: {'ignored' if self.benign else 'skipped'}: {self.reason}"


@dataclass
class ImportReport:
    data_dir: Path
    imported: list[LaneImported] = field(default_factory=list)
    skipped: list[LaneSkipped] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every lane asked for was imported (a 0-byte file aside); a refused lane (already
        in the database, a re-run) is not ok: the operator decides."""
        return all(s.benign for s in self.skipped)

    def summary(self) -> str:
        """One line per lane, sorted by lane."""
        lines = sorted(
            [(i.lane, i.line()) for i in self.imported] + [(s.lane, s.line()) for s in self.skipped]
        )
        if not lines:
            return f"no lane files in {self.data_dir}"
        return "\n".join(line for _, line in lines)


class _Skip(Exception):
    def __init__(self, reason: str, *, benign: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.benign = benign


def import_data_dir(data_dir: Path, dsn: str, *, lanes: list[str] | None = None) -> ImportReport:
    """Import every lane file of `data_dir` (or only `lanes`) into the database at `dsn`.
    Raises ConfigError (no data dir, or a server holds it) or StoreError (database
    unreachable or not migrated) before anything is read; everything about one lane is in
    the report."""
    if not data_dir.is_dir():
        raise ConfigError(f"import: data dir {data_dir} is not a directory")
    lock = DataDirLock(data_dir)
    lock.acquire()  # ConfigError while a server serves this data dir
    try:
        db = _Database(dsn)
        try:
            report = ImportReport(data_dir)
            with tempfile.TemporaryDirectory(prefix="lane-import-") as scratch:
                for lane, path in _lane_files(data_dir, lanes, report):
                    try:
                        report.imported.append(_import_lane(path, lane, Path(scratch), db))
                    except _Skip as skip:
                        report.skipped.append(LaneSkipped(lane, skip.reason, benign=skip.benign))
            return report
        finally:
            db.close()
    finally:
        lock.release()


def _lane_files(
    data_dir: Path, lanes: list[str] | None, report: ImportReport
) -> Iterator[tuple[str, Path]]:
    """(lane, file) for every lane file (sorted), or for each lane asked for; a lane asked
    for with no file, or a bad name, is reported."""
    if lanes is None:
        for p in sorted(data_dir.iterdir()):
            lane = lane_from_file_name(p.name)
            if lane is not None:
                yield lane, p
        return
    for lane in sorted(set(lanes)):
        if LANE_RE.fullmatch(lane) is None:
            report.skipped.append(LaneSkipped(lane, "not a lane name (route:account)"))
            continue
        path = data_dir / lane_file_name(lane)
        if not path.exists():
            report.skipped.append(LaneSkipped(lane, f"no lane file {path.name} in {data_dir}"))
            continue
        yield lane, path


# ---------------------------------------------------------------- the lane file (a copy)


@dataclass(frozen=True)
class _Head:
    """What lands in the lane's `lanes` row."""

    version: int
    next_deadline: float | None
    last_now: float | None
    last_fence: int
    next_seq: int
    last_incident: int
    counts: dict[str, int]
    live: int


def _import_lane(path: Path, lane: str, scratch: Path, db: _Database) -> LaneImported:
    if not path.is_file():
        raise _Skip("not a regular file")
    if is_empty_file(path):
        raise _Skip(
            "0-byte file: the server ignores it (no lane yet); nothing to import", benign=True
        )
    copy = scratch / path.name
    try:
        with _lane_copy(path, lane, copy) as src:
            head = _read_head(src, lane)
            return db.write_lane(lane, src, head)
    except (StoreError, sqlite3.Error, OSError) as exc:
        raise _Skip(_why(exc)) from exc
    finally:
        remove_lane_file(copy)


def _why(exc: BaseException) -> str:
    """The short cause (errno name, "corrupt file (...)", ...), else the store's message."""
    reason = open_failure_reason(exc)
    if isinstance(exc, StoreError) and reason == type(exc).__name__:
        return exc.message
    return reason


@contextlib.contextmanager
def _lane_copy(path: Path, lane: str, copy: Path) -> Iterator[sqlite3.Connection]:
    """The lane file's consistent copy, checked and migrated, read in one transaction."""
    check_lane_header(path)  # a non-SQLite file: refused before anything else
    _snapshot(path, copy)
    with _sqlite(copy) as raw:
        _check_copy(raw)
    store = SqliteLaneStore(copy, lane, busy_timeout_ms=0)
    try:
        store.open()  # migrates the copy; refuses an edited migration
    finally:
        store.close()
    with _sqlite(copy) as src:
        tables = {
            r["name"] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        unknown = sorted(tables - LANE_TABLES)
        if unknown:
            raise _Skip(f"the file holds table {unknown[0]}, which this import does not know")
        src.execute("BEGIN")  # one snapshot for every read below
        try:
            yield src
        finally:
            src.execute("ROLLBACK")


def _snapshot(path: Path, copy: Path) -> None:
    """The lane file's bytes and those of its -wal / -journal (a crash leaves them), 0600."""
    for suffix in ("", "-wal", "-journal"):
        src, dest = (p.with_name(p.name + suffix) for p in (path, copy))
        if suffix and not src.exists():
            continue
        make_private_file(dest)
        shutil.copyfile(src, dest)


@contextlib.contextmanager
def _sqlite(path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    try:
        yield conn
    finally:
        conn.close()


def _check_copy(raw: sqlite3.Connection) -> None:
    """A lane file whose every page reads, and whose migrations this coordinator ships."""
    problems = [r[0] for r in raw.execute("PRAGMA integrity_check")]
    if problems != ["ok"]:
        raise _Skip(f"corrupt file (integrity_check: {problems[0] if problems else '?'})")
    has = raw.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    if has is None:
        raise _Skip("not a lane file (no schema_migrations table)")
    shipped = {v for v, _, _ in lane_migrations()}
    newer = sorted(
        int(r[0])
        for r in raw.execute("SELECT version FROM schema_migrations")
        if int(r[0]) not in shipped
    )
    if newer:
        raise _Skip(
            f"written by a newer coordinator (lane migration {newer[-1]} is unknown here); "
            "import with that version"
        )


def _read_head(src: sqlite3.Connection, lane: str) -> _Head:
    meta = {r["key"]: r["value"] for r in src.execute("SELECT key, value FROM meta")}
    unknown = sorted(set(meta) - META_KEYS)
    if unknown:
        raise _Skip(f"the file holds meta key {unknown[0]!r}, which this import does not know")
    if meta.get("lane", lane) != lane:
        raise _Skip(
            f"the file records lane {meta['lane']!r}, not the {lane!r} its name says: "
            "rename it to the lane it holds"
        )
    head = src.execute("SELECT version, next_deadline, last_now FROM lane_head WHERE id = 1")
    row = head.fetchone()
    if row is None:
        raise _Skip("the file has no lane_head row")
    seq = src.execute("SELECT seq FROM sqlite_sequence WHERE name = 'incidents'").fetchone()
    top = src.execute("SELECT coalesce(max(id), 0) FROM incidents").fetchone()[0]
    counts = {t: int(src.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in COUNTED}
    live = src.execute("SELECT count(*) FROM tickets WHERE state IN ('queued', 'held')")
    return _Head(
        version=int(row["version"]),
        next_deadline=row["next_deadline"],
        last_now=row["last_now"],
        last_fence=int(meta.get("last_fence", "0")),  # as SqliteLaneStore.load reads them
        next_seq=int(meta.get("next_seq", "1")),
        last_incident=max(int(seq[0]) if seq is not None else 0, int(top)),
        counts=counts,
        live=int(live.fetchone()[0]),
    )


# ---------------------------------------------------------------- the database


class _Database:
    """The import's session (autocommit; each lane's transaction is explicit), checked to be
    migrated on connect and opened again after it was lost."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: Conn | None = connect(dsn)
        try:
            schema_status(self._conn)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def _session(self) -> Conn:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self.close()
            self._conn = connect(self._dsn)  # StoreError: the lane is reported
        return self._conn

    def write_lane(self, lane: str, src: sqlite3.Connection, head: _Head) -> LaneImported:
        db = self._session()
        try:
            with db.transaction():
                version, last_now = _claim_lane(db, lane, head)
                db.execute(
                    "UPDATE lanes SET version = %s, next_deadline = %s, last_now = %s, "
                    "last_incident = %s WHERE lane = %s",
                    (version, head.next_deadline, last_now, head.last_incident, lane),
                )
                _copy_rows(db, lane, src, head)
                _check_counts(db, lane, head)
        except psycopg.errors.LockNotAvailable as exc:
            raise _Skip("busy: a replica holds the lane's lock; nothing written") from exc
        except psycopg.Error as exc:
            diag = exc.diag.message_primary
            raise _Skip(
                f"database error ({exc.sqlstate or type(exc).__name__}: {diag or 'no detail'}) "
                f"at {redact_dsn(self._dsn)}; nothing written"
            ) from exc
        return LaneImported(lane, dict(head.counts), head.live, version, head.last_fence)


def _claim_lane(db: Conn, lane: str, head: _Head) -> tuple[int, float | None]:
    """Lock the lane's row (made when missing) and refuse a lane that holds anything. Returns
    the version and last_now to write: the file's, or above what an existing empty row had."""
    made = db.execute(
        "INSERT INTO lanes (lane) VALUES (%s) ON CONFLICT (lane) DO NOTHING RETURNING lane",
        (lane,),
    ).fetchone()
    row = db.execute(
        "SELECT version, last_now, last_fence, next_seq, last_incident FROM lanes "
        "WHERE lane = %s FOR UPDATE",
        (lane,),
    ).fetchone()
    if row is None:
        raise StoreError(f"lane {lane}: no lanes row after creating it")
    held = {t: _pg_count(db, lane, t) for t in COUNTED}
    counters = (row["last_fence"], row["next_seq"], row["last_incident"])
    if any(held.values()) or counters != (0, 1, 0):
        what = ", ".join(f"{n} {_LABEL.get(t, t)}" for t, n in held.items() if n) or "counters"
        raise _Skip(
            f"already in the database (version {row['version']}: {what}); "
            "not merged, nothing written"
        )
    if made is not None:
        return head.version, head.last_now
    last = [t for t in (head.last_now, row["last_now"]) if t is not None]
    return max(head.version, int(row["version"]) + 1), max(last) if last else None


def _copy_rows(db: Conn, lane: str, src: sqlite3.Connection, head: _Head) -> None:
    """Every row of the copy as the engine's Changes (the stores' row code), in batches."""
    write_changes(db, lane, [PutCounters(head.last_fence, head.next_seq)])
    streams: list[tuple[str, Callable[[Row], Change]]] = [
        (
            f"SELECT {TICKET_COLUMNS} FROM tickets ORDER BY seq",
            lambda r: PutTicket(ticket_from_row(r, lane)),
        ),
        (
            f"SELECT {RECEIPT_COLUMNS} FROM receipts ORDER BY rowid",
            lambda r: PutReceipt(receipt_from_row(r)),
        ),
        (
            "SELECT project, last_fence, last_granted_at FROM projects ORDER BY project",
            lambda r: PutProjectServed(r["project"], int(r["last_fence"]), r["last_granted_at"]),
        ),
        (f"SELECT {PAUSE_COLUMNS} FROM pause", lambda r: PutPause(pause_from_row(r))),
        (
            "SELECT machine_id, last_seen_at FROM machines_seen ORDER BY machine_id",
            lambda r: PutMachineSeen(r["machine_id"], float(r["last_seen_at"])),
        ),
    ]
    for query, change in streams:
        cur = src.execute(query)
        while rows := cur.fetchmany(BATCH):
            batch: Sequence[Change] = [change(r) for r in rows]
            with db.pipeline():
                write_changes(db, lane, batch)
    # incidents keep their ids and detail text (not the Change, which numbers them anew)
    cur = src.execute(f"SELECT id, {INCIDENT_COLUMNS} FROM incidents ORDER BY id")
    marks = ", ".join(["%s"] * (INCIDENT_COLUMNS.count(",") + 3))
    while rows := cur.fetchmany(BATCH):
        with db.cursor() as c:
            c.executemany(
                f"INSERT INTO incidents (lane, id, {INCIDENT_COLUMNS}) VALUES ({marks})",
                [(lane, *tuple(r)) for r in rows],
            )


def _check_counts(db: Conn, lane: str, head: _Head) -> None:
    """What the lane holds now is what the file held, table by table (else: ROLLBACK)."""
    for t in COUNTED:
        n = _pg_count(db, lane, t)
        if n != head.counts[t]:
            raise StoreError(f"lane {lane}: {t}: {n} rows written, the file holds {head.counts[t]}")


def _pg_count(db: Conn, lane: str, table: str) -> int:
    row = db.execute(
        f"SELECT count(*) AS n FROM {_PG_TABLE.get(table, table)} WHERE lane = %s", (lane,)
    ).fetchone()
    return int(row["n"]) if row is not None else -1
