"""The lane stores against each other: one suite run on SQLite and on PostgreSQL, and the
differential run of the engine's operations on both. Each store module's own tests (the
PostgreSQL store, presence, the import) are in tests/unit/store/, named after the module."""
