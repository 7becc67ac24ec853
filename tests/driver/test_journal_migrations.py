"""The journal's schema is numbered migrations shipped in the package (client/driver/migrations),
applied once, recorded with their hash; a journal written before they were numbered opens
unchanged and keeps its rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from client.driver import journal as journal_mod
from client.driver.journal import JOURNAL_FILE, Journal, Window, migrations

W = Window("drill:example", "proj", "scene-1", "sha256:" + "5" * 64)

# The table as the journal created it inline before its migrations were numbered files.
LEGACY_SCHEMA = """
CREATE TABLE IF NOT EXISTS windows (
    lane TEXT NOT NULL, project TEXT NOT NULL, scene TEXT NOT NULL, prompt_hash TEXT NOT NULL,
    attempt_id TEXT NOT NULL, ticket_id TEXT, machine_id TEXT, claim_id TEXT, fence INTEGER,
    provider_job_id TEXT,
    phase TEXT NOT NULL CHECK (phase IN
        ('acquired', 'submitting', 'submitted', 'submit-unknown', 'terminal', 'lease-lost')),
    needs TEXT, outcome TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (lane, project, scene, prompt_hash)
) WITHOUT ROWID;
"""


def test_migrations_are_numbered_sql_files_in_the_package() -> None:
    shipped = migrations()
    assert shipped and shipped[0][:2] == (1, "0001_initial.sql")
    assert [v for v, _, _ in shipped] == list(range(1, len(shipped) + 1))
    folder = Path(journal_mod.__file__).parent / "migrations"
    assert sorted(p.name for p in folder.glob("*.sql")) == [n for _, n, _ in shipped]


def test_a_fresh_journal_applies_every_migration_once(state_dir: Path) -> None:
    path = state_dir / JOURNAL_FILE
    with Journal(path) as j:
        assert j.schema_version() == len(migrations())
        j.start(W, ticket_id="t_1", machine_id="studio-a", claim_id="claim-a")
    with Journal(path) as j:  # reopening applies nothing again
        assert j.schema_version() == len(migrations())
        rec = j.get(W)
        assert rec is not None and rec.phase == "acquired"
    db = sqlite3.connect(path)
    rows = db.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    db.close()
    assert rows == [(v, n) for v, n, _ in migrations()]


def test_a_journal_from_before_numbered_migrations_keeps_its_rows(state_dir: Path) -> None:
    path = state_dir / JOURNAL_FILE
    db = sqlite3.connect(path)
    db.executescript(LEGACY_SCHEMA)
    db.execute(
        "INSERT INTO windows VALUES (?, ?, ?, ?, 'a_1', 't_9', 'studio-a', 'claim-a', 3, "
        "'job-1', 'submitted', NULL, NULL, 1.0, 2.0)",
        tuple(W),
    )
    db.commit()
    db.close()
    with Journal(path) as j:
        assert j.schema_version() == len(migrations())
        rec = j.get(W)
        assert rec is not None and (rec.ticket_id, rec.phase, rec.provider_job_id) == (
            "t_9",
            "submitted",
            "job-1",
        )
        assert rec.job_in_flight


def test_an_edited_applied_migration_is_refused(state_dir: Path) -> None:
    path = state_dir / JOURNAL_FILE
    Journal(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_migrations SET sha256 = 'edited' WHERE version = 1")
    db.commit()
    db.close()
    with pytest.raises(RuntimeError, match=r"0001_initial\.sql was edited"):
        Journal(path)
