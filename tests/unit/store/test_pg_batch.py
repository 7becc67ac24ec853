"""A lane transaction's statements in one libpq pipeline (coordinator/store/pg_batch.py), on
a fresh database of the session's cluster: each statement's last result, prepared once per
session, parameters as text, one write for the whole batch, a refused statement raised as
its psycopg class with the session still usable, a lost session closed."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from coordinator.store import pg_batch
from coordinator.store import postgres_db as db
from coordinator.store.pg_batch import Batch, rows, value


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[db.Conn]:
    c = db.connect(pg_dsn)
    yield c
    c.close()


def _prepared(conn: db.Conn) -> list[str]:
    names = conn.execute("SELECT name FROM pg_prepared_statements ORDER BY name").fetchall()
    return [r["name"] for r in names if r["name"].startswith("lc_")]


def test_each_statement_answers_its_last_result_and_is_prepared_once_per_session(
    conn: db.Conn,
) -> None:
    for n in (1, 2):
        batch = Batch(conn)
        batch.execute("BEGIN")
        a = batch.execute("SELECT %s::bigint + 1 AS x", (n,))
        b = batch.execute("SELECT g FROM generate_series(1, %s) g", (3,))
        batch.execute("COMMIT")
        results = batch.run()
        assert value(results[a], 0) == str(n + 1)
        assert rows(results[b]) == 3 and value(results[b], 0, row=2) == "3"
    assert len(_prepared(conn)) == 2  # the second run sent no Parse
    assert conn.info.transaction_status is psycopg.pq.TransactionStatus.IDLE
    assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}  # psycopg goes on


def test_parameters_go_as_text_of_their_python_type(conn: db.Conn) -> None:
    batch = Batch(conn)
    at = batch.execute(
        "SELECT %s::float8 AS f, %s::bigint AS i, %s::text AS s, %s::boolean AS b, "
        "%s::text IS NULL AS n",
        (1764657900.125, 2**40, "lane:é'x", True, None),
    )
    result = batch.run()[at]
    assert [value(result, c) for c in range(5)] == [
        "1764657900.125",
        str(2**40),
        "lane:é'x",
        "t",
        "t",
    ]


def test_a_refused_statement_raises_its_class_after_the_batch_is_drained(
    conn: db.Conn,
) -> None:
    batch = Batch(conn)
    batch.execute("BEGIN")
    batch.execute("SELECT 1 / %s AS boom", (0,))
    batch.execute("SELECT %s::int AS skipped", (1,))
    with pytest.raises(psycopg.errors.DivisionByZero):
        batch.run()
    # the session is usable: in the failed transaction, which the caller rolls back
    assert conn.info.transaction_status is psycopg.pq.TransactionStatus.INERROR
    conn.execute("ROLLBACK")
    again = Batch(conn)
    at = again.execute("SELECT %s::int AS ok", (7,))
    assert value(again.run()[at], 0) == "7"


def test_a_statement_with_another_percent_sign_is_refused(conn: db.Conn) -> None:
    with pytest.raises(ValueError, match="placeholders"):
        Batch(conn).execute("SELECT 'a%%' || %s", ("b",))


def test_a_lost_session_raises_and_is_closed(conn: db.Conn, pg_dsn: str) -> None:
    with db.connect(pg_dsn) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    batch = Batch(conn)
    batch.execute("SELECT %s::int AS x", (1,))
    with pytest.raises(psycopg.OperationalError):
        batch.run()
    assert conn.closed


def test_a_statement_is_named_by_its_text_whatever_was_converted_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Store threads convert at once: a name counted from the table's size gave two
    statements one name (a session then ran one with the other's parameters)."""
    a, b = "SELECT %s::int AS a", "SELECT %s::text AS b"
    monkeypatch.setattr(pg_batch, "_converted", {})
    first = (pg_batch._convert(a), pg_batch._convert(b))
    monkeypatch.setattr(pg_batch, "_converted", {})
    second = (pg_batch._convert(a), pg_batch._convert(b))
    monkeypatch.setattr(pg_batch, "_converted", {})
    reverse = (pg_batch._convert(b), pg_batch._convert(a))
    assert first == second == reverse[::-1]
    assert first[0][0] != first[1][0]
    assert first[0][1] == b"SELECT $1::int AS a"
