"""`python -m tests.powerloss.launch SYNC ARGS...`: `lane-coordinator ARGS` with every SQLite
connection's `PRAGMA synchronous = ...` replaced by `PRAGMA synchronous = SYNC`.

The power-loss control (test_powerloss.py): the real server with one setting changed, the one
that decides whether a commit is on the disk when it returns. With SYNC = NORMAL a WAL commit
is fsynced only at the next checkpoint, so a power loss must lose acknowledged operations (and
kill -9 must not: the page cache keeps them). Each replaced pragma prints one line
"powerloss-launch: synchronous=SYNC" to stderr, so the test knows the override took.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import Any

_real_connect = sqlite3.connect


def _connection_class(sync: str) -> type[sqlite3.Connection]:
    class Connection(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            text = " ".join(sql.lower().split())
            if text.startswith("pragma synchronous") and "=" in text:
                sql = f"PRAGMA synchronous = {sync}"
                print(f"powerloss-launch: synchronous={sync}", file=sys.stderr, flush=True)
            return super().execute(sql, *args)

    return Connection


def install(sync: str) -> None:
    """Every later `sqlite3.connect(...)` without its own factory makes such a connection."""
    factory = _connection_class(sync)

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", factory)
        conn: sqlite3.Connection = _real_connect(*args, **kwargs)
        return conn

    sqlite3.connect = connect  # type: ignore[assignment]  # the overloads, for this process


def main() -> int:
    sync, rest = sys.argv[1], sys.argv[2:]
    if sync.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise SystemExit(f"powerloss-launch: synchronous {sync!r}?")
    install(sync.upper())
    from coordinator.cli import main as coordinator_main

    return coordinator_main(rest)


if __name__ == "__main__":
    sys.exit(main())
