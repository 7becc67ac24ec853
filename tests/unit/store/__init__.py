"""Unit tests of coordinator/store: tests/unit/store/test_<module>.py for each module (real
SQLite files in tmp_path, real PostgreSQL through the `pg_dsn` fixture)."""
