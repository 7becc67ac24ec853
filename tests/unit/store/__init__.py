"""Unit tests of coordinator/store: one test module per module, named after it (real
SQLite files in tmp_path, real PostgreSQL through the `pg_dsn` fixture)."""
