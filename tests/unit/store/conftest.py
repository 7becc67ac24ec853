"""The store fixtures of tests/store_pg (`stores` / `store`: both stores; `pg_stores` /
`pg_store`: PostgreSQL only), for the store modules' own tests here."""

from __future__ import annotations

from tests.store_pg.conftest import pg_store, pg_stores, store, stores

__all__ = ["pg_store", "pg_stores", "store", "stores"]
