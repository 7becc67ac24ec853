"""The lane stores against each other: one suite run on SQLite and on PostgreSQL, plus the
PostgreSQL store's own tests (several replicas on one lane, migrations)."""
