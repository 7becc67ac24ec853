"""The live-job record: a small local SQLite journal of render windows
(docs/protocol.md#driver-rules).

One row per window — `(lane, project, scene, promptHash)` — saying which ticket the window
holds (ticket, machine, claim, fence), whether a provider job was submitted (its id), and how
far it got:

    acquired        a ticket exists for the window; nothing was sent to the provider
    submitting      the provider submit call is running (a crash here = unknown)
    submitted       the provider returned a job id; no terminal state seen yet
    submit-unknown  the submit raised (or the driver died during it): whether the provider
                    accepted the job is unknown until `reconcile()` says so
    terminal        the job (or the turn) ended; `outcome` says how
    lease-lost      three heartbeats were refused: the window `needs` `rerender:lease-lost`;
                    a job id here means the provider job may still be running

A driver restarted after a crash finds the row for the same window: a job that was submitted
and has no terminal phase is *resumed* (polled), never submitted again; a `submit-unknown`
row must be reconciled first (client/driver/turn.py does both). A `terminal` row, or one that
never reached the provider, is replaced by the next attempt.

The file lives in the state dir (`LANE_STATE_DIR`, `driver-journal.sqlite`), in WAL mode
with `synchronous=FULL`: a row is on disk before the provider is called. Like the local
queue, a synced folder or network mount is refused (SQLite WAL is not a cross-machine
protocol). It is safe for several threads and processes of one computer.

The schema is the numbered migrations in client/driver/migrations/ (shipped in the wheel),
applied in order on open and recorded in `schema_migrations` with their sha256, like the
coordinator's lane store: never edit an applied migration, add a new numbered one.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final, Literal, NamedTuple, TypedDict

from client.clock import wall
from client.closing import Closing
from client.local_fs import check_state_dir

JOURNAL_FILE: Final = "driver-journal.sqlite"

Phase = Literal["acquired", "submitting", "submitted", "submit-unknown", "terminal", "lease-lost"]
PHASES: Final[tuple[Phase, ...]] = (
    "acquired",
    "submitting",
    "submitted",
    "submit-unknown",
    "terminal",
    "lease-lost",
)
NEEDS_LEASE_LOST: Final = "rerender:lease-lost"
NEEDS_RECONCILE: Final = "reconcile:submit-unknown"

_COLUMNS = (
    "lane, project, scene, prompt_hash, attempt_id, ticket_id, machine_id, claim_id, fence, "
    "provider_job_id, phase, needs, outcome, created_at, updated_at"
)


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every shipped journal migration, in order."""
    out = []
    folder = resources.files("client.driver") / "migrations"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            out.append((version, entry.name, entry.read_text(encoding="utf-8")))
    return out


def _statements(sql: str) -> list[str]:
    lines = [ln for ln in sql.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def new_attempt_id() -> str:
    """`a_` + 96 random bits, hex: an id for one attempt at a window."""
    return "a_" + secrets.token_hex(12)


class Window(NamedTuple):
    """A render window: the request identity (docs/protocol.md#glossary), within one lane."""

    lane: str
    project: str
    scene: str
    prompt_hash: str


class Changes(TypedDict, total=False):
    """`Journal.update`'s changes, as keyword arguments (a caller passing them on)."""

    phase: Phase | None
    fence: int | None
    provider_job_id: str | None
    needs: str | None
    clear_needs: bool
    outcome: str | None


@dataclass(frozen=True, slots=True)
class Record:
    lane: str
    project: str
    scene: str
    prompt_hash: str
    attempt_id: str  # minted per fresh attempt, kept across resume: an idempotency key
    ticket_id: str | None
    machine_id: str | None
    claim_id: str | None
    fence: int | None
    provider_job_id: str | None
    phase: Phase
    needs: str | None
    outcome: str | None
    created_at: float
    updated_at: float

    @property
    def window(self) -> Window:
        return Window(self.lane, self.project, self.scene, self.prompt_hash)

    @property
    def job_in_flight(self) -> bool:
        """A provider job was submitted and no terminal state was recorded: resume it
        (poll), never submit again."""
        return self.provider_job_id is not None and self.phase in ("submitted", "lease-lost")

    @property
    def unknown(self) -> bool:
        """The submit's fate is unknown (it raised, or the driver died during it):
        reconcile before any new submit."""
        return self.phase in ("submit-unknown", "submitting")

    @property
    def unfinished(self) -> bool:
        """The next attempt on this window must resume or reconcile, not start fresh."""
        return self.job_in_flight or self.unknown

    @property
    def ticket_may_be_live(self) -> bool:
        """The recorded ticket may still be queued or held (not ended by this journal)."""
        return self.ticket_id is not None and self.phase not in ("terminal", "lease-lost")


class Journal(Closing):
    """The live-job record (see the module docstring). Every method commits at once."""

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = wall) -> None:
        self.path = Path(path).expanduser()
        check_state_dir(self.path.parent)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._clock = clock
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.path, timeout=30.0, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = FULL")
        self._db.execute("PRAGMA busy_timeout = 30000")
        try:
            self._migrate()
        except BaseException:
            self._db.close()
            raise

    def _migrate(self) -> None:
        """Apply the shipped migrations this file has not seen, in one transaction."""
        with self._tx() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, sha256 TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            applied = dict(db.execute("SELECT version, sha256 FROM schema_migrations").fetchall())
            for version, name, sql in migrations():
                digest = hashlib.sha256(sql.encode()).hexdigest()
                if version in applied:
                    if applied[version] != digest:
                        raise RuntimeError(
                            f"journal migration {name} was edited after it was applied; "
                            "add a new numbered migration instead"
                        )
                    continue
                for statement in _statements(sql):
                    db.execute(statement)
                db.execute(
                    "INSERT INTO schema_migrations (version, name, sha256, applied_at) "
                    "VALUES (?, ?, ?, datetime('now'))",
                    (version, name, digest),
                )

    def schema_version(self) -> int:
        """The newest migration applied to this file (0: none)."""
        with self._lock:
            row = self._db.execute("SELECT max(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0)

    @classmethod
    def in_state_dir(cls, state_dir: str | Path) -> Journal:
        """The journal file in a state dir (`Settings.state_dir`, i.e. LANE_STATE_DIR)."""
        return cls(Path(state_dir).expanduser() / JOURNAL_FILE)

    def __repr__(self) -> str:
        return f"Journal({str(self.path)!r})"

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # ---------------------------------------------------------------- reads

    def get(self, window: Window) -> Record | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM windows "
                "WHERE lane = ? AND project = ? AND scene = ? AND prompt_hash = ?",
                tuple(window),
            ).fetchone()
        return Record(*row) if row is not None else None

    def records(self, *, lane: str | None = None) -> list[Record]:
        """Every row (optionally of one lane), most recently updated first."""
        sql = f"SELECT {_COLUMNS} FROM windows"
        args: tuple[str, ...] = ()
        if lane is not None:
            sql += " WHERE lane = ?"
            args = (lane,)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY updated_at DESC", args).fetchall()
        return [Record(*r) for r in rows]

    def unfinished(self, *, lane: str | None = None) -> list[Record]:
        """Windows whose next attempt must resume a job or reconcile an unknown submit."""
        return [r for r in self.records(lane=lane) if r.unfinished]

    def needing(self, needs: str = NEEDS_LEASE_LOST) -> list[Record]:
        return [r for r in self.records() if r.needs == needs]

    # ---------------------------------------------------------------- writes

    def start(
        self,
        window: Window,
        *,
        ticket_id: str,
        machine_id: str,
        claim_id: str | None,
        fence: int | None = None,
        keep_job: bool = False,
    ) -> Record:
        """Record the window's ticket. A fresh attempt (keep_job=False) resets the row to
        `acquired`; with keep_job=True the job id, phase and needs of an unfinished row are
        kept (a resumed window moving to a new ticket)."""
        now = self._clock()
        with self._tx() as db:
            old = db.execute(
                "SELECT provider_job_id, phase, needs, created_at, attempt_id FROM windows "
                "WHERE lane = ? AND project = ? AND scene = ? AND prompt_hash = ?",
                tuple(window),
            ).fetchone()
            job, phase, needs, created, attempt = None, "acquired", None, now, new_attempt_id()
            if old is not None and keep_job:
                job, phase, needs, created, attempt = old
            db.execute(
                f"INSERT OR REPLACE INTO windows ({_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?)",
                (*window, attempt, ticket_id, machine_id, claim_id, fence, job, phase, needs,
                 created, now),
            )  # fmt: skip
        rec = self.get(window)
        assert rec is not None
        return rec

    def update(
        self,
        window: Window,
        *,
        phase: Phase | None = None,
        fence: int | None = None,
        provider_job_id: str | None = None,
        needs: str | None = None,
        clear_needs: bool = False,
        outcome: str | None = None,
    ) -> Record:
        """Change some fields of an existing row (None leaves a field as it is)."""
        if phase is not None and phase not in PHASES:
            raise ValueError(f"phase: must be one of {', '.join(PHASES)}")
        sets: list[str] = ["updated_at = ?"]
        args: list[object] = [self._clock()]
        for col, val in (
            ("phase", phase),
            ("fence", fence),
            ("provider_job_id", provider_job_id),
            ("needs", needs),
            ("outcome", outcome),
        ):
            if val is not None:
                sets.append(f"{col} = ?")
                args.append(val)
        if clear_needs and needs is None:
            sets.append("needs = NULL")
        with self._tx() as db:
            cur = db.execute(
                f"UPDATE windows SET {', '.join(sets)} "
                "WHERE lane = ? AND project = ? AND scene = ? AND prompt_hash = ?",
                (*args, *window),
            )
            if cur.rowcount != 1:
                raise KeyError(f"no journal record for {window}")
        rec = self.get(window)
        assert rec is not None
        return rec

    def forget(self, window: Window) -> bool:
        """Delete a window's row (after a human settled it). True when there was one."""
        with self._tx() as db:
            cur = db.execute(
                "DELETE FROM windows "
                "WHERE lane = ? AND project = ? AND scene = ? AND prompt_hash = ?",
                tuple(window),
            )
            return cur.rowcount == 1


__all__ = [
    "JOURNAL_FILE",
    "NEEDS_LEASE_LOST",
    "NEEDS_RECONCILE",
    "PHASES",
    "Journal",
    "Phase",
    "Record",
    "Window",
    "migrations",
    "new_attempt_id",
]
