"""Where a coordinator keeps its lanes: the store chosen at start, behind one interface the
lane registry uses (coordinator/actor/registry.py).

- `SqliteStorage` (the default, coordinator/store/sqlite_storage.py): one file per lane under
  the data dir, one server per data dir (a lock file); `shared` is False.
- `PostgresStorage` (coordinator/store/postgres_storage.py): every lane in one database that
  any number of replicas serve; `shared` is True: another replica may move a lane on at any
  time, so every lane transaction locks the lane first (coordinator/actor/locking.py), a
  NOTIFY wakes other replicas' parked awaits and an alarm poller fires deadlines armed by
  any replica.

Every method may block (files, the network): the registry calls them on a store thread.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from coordinator.constants import DEFAULT_REPLICA_STALL_SECONDS
from coordinator.engine.store import LaneStore
from coordinator.errors import ConfigError

SQLITE = "sqlite"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class Storage(Protocol):
    kind: str  # what replies say in `coordinator`
    shared: bool  # several processes serve the same lanes
    max_transactions: int | None  # lane transactions at once (None: unbounded)

    def start(self) -> None:
        """Check the store can be served (schema, data dir lock); raise StoreError or
        ConfigError with the reason otherwise."""
        ...

    def stop(self) -> None: ...

    def make_store(self, lane: str) -> LaneStore: ...

    def stored_lanes(self) -> list[str]:
        """Every lane the store holds, sorted."""
        ...

    def has_lane(self, lane: str) -> bool: ...

    def problem(self) -> str | None:
        """Why nothing could be committed now (None: the store is reachable and writable)."""
        ...

    def where(self, lane: str) -> dict[str, str]:
        """Log fields naming where the lane lives (its file, or nothing: the database)."""
        ...

    def peek_deadline(self, lane: str) -> tuple[bool, float | None]:
        """(known, next deadline) of a stored lane without opening it (startup re-arm)."""
        ...

    def lanes_due(self, now: float) -> list[str]:
        """Lanes whose recorded next deadline has come (the alarm poller; [] when the
        store is not shared: this process armed every alarm itself)."""
        ...

    async def listen(
        self, on_lane: Callable[[str], None], on_connected: Callable[[], None]
    ) -> None:
        """Until cancelled: call `on_lane(lane)` when another process committed a change to
        the lane that may wake a parked await, `on_connected()` whenever notifications may
        have been missed (returns at once when the store is not shared)."""
        ...


def postgres_url(url: str | None) -> str | None:
    """The one reading of a `store` setting: None for the SQLite store (None or "sqlite"),
    else the postgresql:// URL; ConfigError for anything else (the value itself is not
    repeated: it may hold a password)."""
    if url is None or url == SQLITE:
        return None
    if url.startswith(POSTGRES_SCHEMES):
        return url
    raise ConfigError("store: expected 'sqlite' or a postgresql://user@host[:port]/db URL")


def store_label(url: str | None) -> str:
    """The store a `store` setting names, for messages and logs: "sqlite", or the
    PostgreSQL URL without its password."""
    pg = postgres_url(url)
    if pg is None:
        return SQLITE
    from coordinator.store.postgres_db import redact_dsn

    return redact_dsn(pg)


def sqlite_data_dir(data_dir: Path | None) -> Path:
    """The SQLite store's data dir (ConfigError when there is none)."""
    if data_dir is None:
        raise ConfigError("store: sqlite (the default) needs --data-dir")
    return data_dir


def open_storage(
    url: str | None, data_dir: Path | None, *, stall_seconds: float = DEFAULT_REPLICA_STALL_SECONDS
) -> Storage:
    """The store a URL names (None or "sqlite": lane files under data_dir); on PostgreSQL,
    `stall_seconds` is the config's `replica_stall_seconds`."""
    pg = postgres_url(url)
    if pg is None:
        from coordinator.store.sqlite_storage import SqliteStorage

        return SqliteStorage(sqlite_data_dir(data_dir))
    from coordinator.store.postgres_storage import PostgresStorage

    return PostgresStorage(pg, stall_seconds=stall_seconds)
