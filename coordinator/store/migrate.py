"""The numbered migrations shipped in coordinator/store/migrations and the runner that applies
them to a lane file: each once, in order, refusing one edited after it was applied. The
listing of a migrations folder, a migration's digest and the refusal of an edited one serve
the PostgreSQL migrations (postgres_db.py) too."""

from __future__ import annotations

import hashlib
import sqlite3
from importlib import resources

from coordinator.errors import StoreError

# How a refused edited migration's message says it (files.open_failure_reason reads it).
EDITED = "was edited after it was applied"


def shipped(folder: str) -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration shipped in coordinator/store/<folder>, in
    order (lane files: migrations/, PostgreSQL: pg_migrations/)."""
    out = []
    entries = (resources.files("coordinator.store") / folder).iterdir()
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            out.append((version, entry.name, entry.read_text(encoding="utf-8")))
    return out


def sha256(sql: str) -> str:
    """A migration's digest, as schema_migrations records it."""
    return hashlib.sha256(sql.encode()).hexdigest()


def edited(name: str) -> str:
    """The refusal of migration `name`, changed since a database recorded it."""
    return f"migration {name} {EDITED}; add a new numbered migration instead"


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every shipped migration of a lane file, in order."""
    return shipped("migrations")


def latest_migration() -> int:
    """The schema version this coordinator's lane files have once migrated."""
    return migrations()[-1][0]


def apply_migrations(db: sqlite3.Connection, lane: str, max_migration: int | None) -> None:
    """Apply every shipped migration not yet applied (up to `max_migration`, for tests) and
    record the lane's name, in one transaction."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
            "name TEXT NOT NULL, sha256 TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        applied = {
            r["version"]: (r["name"], r["sha256"])
            for r in db.execute("SELECT version, name, sha256 FROM schema_migrations")
        }
        for version, name, sql in migrations():
            if max_migration is not None and version > max_migration:
                break
            digest = sha256(sql)
            if version in applied:
                if applied[version][1] != digest:
                    raise StoreError(edited(name), reason="edited migration")
                continue
            for statement in _split_sql(sql):
                db.execute(statement)
            db.execute(
                "INSERT INTO schema_migrations (version, name, sha256, applied_at) "
                "VALUES (?, ?, ?, datetime('now'))",
                (version, name, digest),
            )
        db.execute(
            "INSERT INTO meta (key, value) VALUES ('lane', ?) ON CONFLICT (key) DO NOTHING",
            (lane,),
        )
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _split_sql(sql: str) -> list[str]:
    lines = [ln for ln in sql.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
