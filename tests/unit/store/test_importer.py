"""`import_data_dir` (coordinator/store/importer.py): lane files written by the real server on
SQLite, copied into PostgreSQL. Every table equal lane by lane (rows, ids, order, counters),
every store read equal, the lane continues on PostgreSQL as it would have on SQLite; a second
import, a corrupt file, a failing lane, an unmigrated database, a running server and a lane
the database already holds are each refused as documented, and no lane file is ever written."""

from __future__ import annotations

import hashlib
import itertools
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest

from coordinator.engine.commands import Acquire, Release, TicketCall
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import Change
from coordinator.engine.operations import (
    AcquireOp,
    EvidenceOp,
    HistoryOp,
    Operation,
    ReleaseOp,
    StatusOp,
)
from coordinator.engine.store import Reads, lane_now
from coordinator.errors import ConfigError, StoreError
from coordinator.protocol.errors import LaneError
from coordinator.store.importer import ImportReport, LaneSkipped, import_data_dir
from coordinator.store.postgres import PostgresLaneStore, migrate
from coordinator.store.rows import TICKET_COLUMNS
from coordinator.store.sqlite import SqliteLaneStore
from tests.harness import TestManualClock, make_config, start_running
from tests.integration.kit import DUO, SOLO, acquire_body, receipt_body, ticket_body
from tests.store_pg.kit import AnyStore

# the render log is pruned (receipts with it); a queued ticket outlives a long pause
# (no in-flight holds: the replayed script expects the reaped lease's slot to free at once)
CONFIG = make_config(history_retained=3, waiter_timeout_seconds=3600.0, in_flight_hold_seconds=0.0)
LANES = (DUO, SOLO)
ALL = 10_000  # read limit above anything a built lane holds
WRONG_HASH = "sha256:" + hashlib.sha256(b"something else").hexdigest()


# ---------------------------------------------------------------- a data dir the server wrote


async def _build(data_dir: Path) -> float:
    """Two lanes with a life on the real server (SQLite), then stopped; returns its clock.

    solo:main (capacity 1, history 3): grants, a queue, heartbeats, receipts (verified and a
    hash mismatch), releases, a cooldown that ended, an expired lease, the render log pruned,
    and at the end a held ticket, a queued one and a live pause. duo:main (capacity 2): a
    duplicate collision, receipts in every phase created in the same second."""
    clock = TestManualClock()
    srv = await start_running(data_dir, config=CONFIG, clock=clock)
    try:

        async def acquire(lane: str = SOLO, **kw: Any) -> str:
            r = await srv.ok("acquire", acquire_body(lane=lane, **kw))
            tid: str = r["ticket"]["ticketId"]
            return tid

        async def receipt(lane: str, tid: str, status: int = 201, **kw: Any) -> None:
            r = await srv.op("receipt", receipt_body(lane, tid, **kw))
            assert r.status == status, r.text

        a = await acquire(machine="mA", claim="cA", project="p1", scene="s1", prompt="a")
        b = await acquire(machine="mB", claim="cB", project="p2", scene="s2", prompt="b")
        clock.advance(5)
        await srv.ok("heartbeat", ticket_body(SOLO, a))
        await receipt(SOLO, a, payload={"refs": 3, "text": "é"})
        await receipt(
            SOLO, a, phase="provider-submitted", payload={"a": 1}, content_hash=WRONG_HASH
        )
        await srv.ok(
            "release", ticket_body(SOLO, a, outcome="completed", providerJobId="job-1", note="n")
        )
        clock.advance(1)
        await srv.ok(
            "cooldown",
            ticket_body(
                SOLO, b, "mB", "cB", reasonCode="provider-human-check", retryAfterSeconds=60
            ),
        )
        await srv.ok("release", ticket_body(SOLO, b, "mB", "cB", outcome="failed"))
        clock.advance(100)  # the pause ends
        for i in range(4):
            t = await acquire(machine="mC", claim=None, project="p3", scene=f"c{i}", prompt="c")
            await receipt(SOLO, t, machine="mC", claim=None, payload={"i": i})
            clock.advance(2)
            await srv.ok("release", ticket_body(SOLO, t, "mC", None, outcome="completed"))
        e = await acquire(machine="mE", claim="cE", prompt="e", leaseSeconds=15)
        clock.advance(16)
        await srv.ok("status", {"lane": SOLO})  # e's lease is reaped
        st = await srv.ok("heartbeat", ticket_body(SOLO, e, "mE", "cE"))
        assert st["state"] == "expired"
        h = await acquire(machine="mH", claim="cH", prompt="h", leaseSeconds=300)
        await acquire(machine="mQ", claim="cQ", prompt="q")
        await receipt(SOLO, h, machine="mH", claim="cH", payload={"h": 1})
        await receipt(
            SOLO, h, phase="provider-submitted", machine="mH", claim="cH", payload={"h": 2},
            content_hash=WRONG_HASH,
        )  # fmt: skip
        await srv.ok(
            "cooldown",
            ticket_body(
                SOLO, h, "mH", "cH", reasonCode="provider-human-check", retryAfterSeconds=600
            ),
        )

        x = await acquire(DUO, machine="mX", claim="cX", project="p", scene="dup", prompt="d")
        await acquire(DUO, machine="mY", claim="cY", project="p", scene="dup", prompt="d")
        await acquire(DUO, machine="mZ", claim="cZ", project="p", scene="z", prompt="z")
        for phase in ("lease-acquired", "references-applied", "provider-submitted"):
            await receipt(DUO, x, phase=phase, machine="mX", claim="cX", payload={"p": phase})
        now: float = clock.now()
    finally:
        await srv.stop()
    return now


@pytest.fixture
async def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    await _build(d)
    return d


def _digests(data_dir: Path) -> dict[str, str]:
    """Every file of the data dir by content (the lock file aside: the import takes it)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(data_dir.iterdir())
        if p.is_file() and not p.name.startswith(".lane-coordinator.lock")
    }


@pytest.fixture
def migrated(pg_dsn: str) -> str:
    migrate(pg_dsn)
    return pg_dsn


# ---------------------------------------------------------------- what each side holds

SQLITE_TABLES = {
    "meta", "tickets", "projects", "pause", "receipts", "incidents", "lane_head",
    "machines_seen", "schema_migrations", "sqlite_sequence",
}  # fmt: skip
RECEIPT_COLS = (
    "receipt_id, ticket_id, phase, machine_id, payload, content_hash, content_hash_verified, "
    "created_at"
)
PAUSE_COLS = "reason_code, started_at, until, machine_id, claim_id, ticket_id"
# table -> (SQLite query, PostgreSQL query): every row, in the order reads rely on
TABLES = {
    "tickets": (
        f"SELECT {TICKET_COLUMNS} FROM tickets ORDER BY seq",
        f"SELECT {TICKET_COLUMNS} FROM tickets WHERE lane = %s ORDER BY seq",
    ),
    "receipts": (
        f"SELECT {RECEIPT_COLS} FROM receipts ORDER BY rowid",
        f"SELECT {RECEIPT_COLS} FROM receipts WHERE lane = %s ORDER BY id",
    ),
    "incidents": (
        "SELECT id, kind, at, ticket_id, machine_id, detail FROM incidents ORDER BY id",
        "SELECT id, kind, at, ticket_id, machine_id, detail FROM incidents "
        "WHERE lane = %s ORDER BY id",
    ),
    "projects": (
        "SELECT project, last_fence, last_granted_at FROM projects ORDER BY project",
        "SELECT project, last_fence, last_granted_at FROM projects WHERE lane = %s "
        "ORDER BY project",
    ),
    "pause": (
        f"SELECT {PAUSE_COLS} FROM pause",
        f"SELECT {PAUSE_COLS} FROM pauses WHERE lane = %s",
    ),
    "machines_seen": (
        "SELECT machine_id, last_seen_at FROM machines_seen ORDER BY machine_id",
        "SELECT machine_id, last_seen_at FROM machines_seen WHERE lane = %s ORDER BY machine_id",
    ),
}


def _sqlite_rows(data_dir: Path, lane: str, scratch: Path) -> dict[str, Any]:
    """Every table of a lane file (a copy), and its head and counters."""
    db = sqlite3.connect(_copy(data_dir, lane, scratch))
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == SQLITE_TABLES, "a new lane table: teach the import (and this test) it"
        # SQLite's 0/1 verdicts compare equal to PostgreSQL's booleans (1 == True)
        out: dict[str, Any] = {t: [tuple(r) for r in db.execute(q)] for t, (q, _) in TABLES.items()}
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        seq = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'incidents'").fetchone()
        out["head"] = (
            *db.execute("SELECT version, next_deadline, last_now FROM lane_head").fetchone(),
            int(meta["last_fence"]),
            int(meta["next_seq"]),
            seq[0] if seq else 0,
        )
        return out
    finally:
        db.close()


def _pg_rows(dsn: str, lane: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as db:
        out: dict[str, Any] = {
            t: [tuple(r) for r in db.execute(q, (lane,))] for t, (_, q) in TABLES.items()
        }
        out["head"] = db.execute(
            "SELECT version, next_deadline, last_now, last_fence, next_seq, last_incident "
            "FROM lanes WHERE lane = %s",
            (lane,),
        ).fetchone()
        return out


def _pg_lanes(dsn: str) -> dict[str, int]:
    """lane -> rows it has in any table (the lanes row counted)."""
    with psycopg.connect(dsn) as db:
        out: dict[str, int] = {}
        for table in (
            "lanes",
            "tickets",
            "receipts",
            "incidents",
            "projects",
            "pauses",
            "machines_seen",
        ):
            for lane, n in db.execute(f"SELECT lane, count(*) FROM {table} GROUP BY lane"):
                out[lane] = out.get(lane, 0) + n
        return out


def _reads(s: AnyStore) -> dict[str, Any]:
    """Everything the lane's stores answer, through their own read code."""
    history = s.history(ALL, None)
    snap = s.load()
    tickets = [t.ticket_id for t in [*snap.live, *history]]
    receipts = s.recent_receipts(ALL)
    return {
        "load": snap,
        "history": history,
        "history_by_project": {p: s.history(ALL, p) for p in ("p", "p1", "p2", "p3", "x")},
        "history_count": s.history_count(),
        "recent_receipts": receipts,
        "tickets": {t: s.get_ticket(t) for t in [*tickets, "nope"]},
        "receipts_for_ticket": {t: s.receipts_for_ticket(t) for t in tickets},
        "receipts": {r.receipt_id: s.get_receipt(r.receipt_id) for r in receipts},
        "incidents": s.incidents(ALL),
    }


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "scratch"
    d.mkdir()
    yield d
    shutil.rmtree(d)


def _copy(data_dir: Path, lane: str, scratch: Path) -> Path:
    """A copy of a lane file the server closed (no -wal left: its bytes are the lane). Any
    SQLite connection to the file itself, a read-only one too, would leave -wal and -shm."""
    name = lane.replace(":", "+") + ".sqlite"
    assert not (data_dir / f"{name}-wal").exists()
    copy = scratch / f"{next(_copies)}-{name}"
    shutil.copyfile(data_dir / name, copy)
    return copy


_copies = itertools.count()


def _sqlite_copy(data_dir: Path, lane: str, scratch: Path) -> SqliteLaneStore:
    """The SQLite store of a copy of the lane file (opening a store migrates its file)."""
    s = SqliteLaneStore(_copy(data_dir, lane, scratch), lane)
    s.open()
    return s


def _pg(dsn: str, lane: str) -> PostgresLaneStore:
    s = PostgresLaneStore(dsn, lane)
    s.open()
    return s


def _assert_same_lane(data_dir: Path, lane: str, dsn: str, scratch: Path) -> None:
    want, got = _sqlite_rows(data_dir, lane, scratch), _pg_rows(dsn, lane)
    for table in [*TABLES, "head"]:
        assert got[table] == want[table], f"{lane}: {table}"
    sq, pg = _sqlite_copy(data_dir, lane, scratch), _pg(dsn, lane)
    try:
        w, g = _reads(sq), _reads(pg)
        for key in w:
            assert g[key] == w[key], f"{lane}: {key}"
    finally:
        sq.close()
        pg.close()


# ---------------------------------------------------------------- the import


async def test_every_lane_is_imported_complete_and_reads_the_same(
    data_dir: Path, migrated: str, scratch: Path
) -> None:
    before = _digests(data_dir)
    report = import_data_dir(data_dir, migrated)
    assert report.ok, report.summary()
    assert [i.lane for i in report.imported] == list(LANES) and report.skipped == []
    assert _digests(data_dir) == before  # no lane file written (nor a -wal/-shm left)
    # the lanes are what the test means them to be: otherwise equality proves little
    solo = _sqlite_rows(data_dir, SOLO, scratch)
    verdicts = {r[6] for r in solo["receipts"]}
    assert verdicts == {0, 1}  # a verified receipt and a hash mismatch
    assert solo["pause"] and solo["head"][1] is not None  # a live pause, a next deadline
    assert min(r[1] for r in solo["tickets"]) > 1  # the oldest log rows were pruned
    kinds = {r[1] for r in solo["incidents"]}
    assert {"receipt-hash-mismatch", "lease-expired", "provider-cooldown-ended"} <= kinds
    states = [r[2] for r in solo["tickets"]]
    assert {"queued", "held", "done", "expired"} <= set(states)
    assert {r[0] for r in solo["machines_seen"]} >= {"mA", "mH", "mQ"}
    duo = _sqlite_rows(data_dir, DUO, scratch)
    assert "duplicate-collision" in {r[1] for r in duo["incidents"]}
    assert len({r[7] for r in duo["receipts"]}) == 1 < len(duo["receipts"])  # same second
    for lane in LANES:
        _assert_same_lane(data_dir, lane, migrated, scratch)
    [line_duo, line_solo] = report.summary().splitlines()
    assert line_solo.startswith("solo:main: imported (")
    assert f"{len(solo['tickets'])} tickets" in line_solo
    assert f"{len(solo['receipts'])} receipts" in line_solo
    assert f"last fence {solo['head'][3]}" in line_solo
    assert line_duo.startswith("duo:main: imported (")


def _run(store: AnyStore, lane: str, op: Operation[Any], clock: float) -> Any:
    """One operation in a lane transaction, as the lane actor runs it (a fresh core)."""
    settings = CONFIG.lane_settings(lane)
    assert settings is not None
    head = store.begin()
    try:
        snap = store.load()
        now = lane_now(clock, head.last_now)
        core = LaneCore(lane, settings, snap, now)
        changes: list[Change] = list(core.advance(now).changes)
        store.apply(changes)
        try:
            result = op.run(core, now, Reads.perform(store, op.needs(core)))
            reply: Any = msgspec.to_builtins(result.reply)
            store.apply(result.fx.changes)
            changes += result.fx.changes
        except LaneError as exc:
            reply = {"error": exc.code}
        if changes:
            store.finish(core.next_deadline(), now)
        else:
            store.abort()
        return reply
    except BaseException:
        store.abort()
        raise


async def test_a_replica_continues_the_lane_where_the_file_stopped(
    tmp_path: Path, migrated: str, scratch: Path
) -> None:
    data = tmp_path / "data"
    t = await _build(data)
    assert import_data_dir(data, migrated).ok
    last_fence = _sqlite_rows(data, SOLO, scratch)["head"][3]
    call = TicketCall("mN", "cN", "t_new")
    script: list[tuple[float, Operation[Any]]] = [
        (1, StatusOp(10, receipts=5)),
        (2, AcquireOp(Acquire("mN", "cN", "p9", "s9", "n", 30.0, "t_new"))),  # paused: queued
        (700, StatusOp(10)),  # pause over, h's lease reaped: the queued ones are granted
        (701, ReleaseOp(Release(call, "completed", None, None))),
        (702, HistoryOp(10, None)),
        (703, EvidenceOp("t_new")),
        (704, StatusOp(10, receipts=5)),
    ]
    sq, pg = _sqlite_copy(data, SOLO, scratch), _pg(migrated, SOLO)
    try:
        want = [_run(sq, SOLO, op, t + at) for at, op in script]
        got = [_run(pg, SOLO, op, t + at) for at, op in script]
        for step, (w, g) in enumerate(zip(want, got, strict=True)):
            assert g == w, f"step {step}: {script[step][1]!r}"
        assert _reads(pg) == _reads(sq)
        assert pg.incidents(ALL) == sq.incidents(ALL)  # new incident ids continue alike
    finally:
        sq.close()
        pg.close()
    granted = [t["fence"] for t in got[2]["held"]]
    assert granted and min(granted) == last_fence + 1  # fences continue, never reused
    assert got[4]["entries"][0]["ticketId"] == "t_new"


async def test_a_second_import_refuses_every_lane_and_changes_nothing(
    data_dir: Path, migrated: str, scratch: Path
) -> None:
    assert import_data_dir(data_dir, migrated).ok
    before = {lane: _pg_rows(migrated, lane) for lane in LANES}
    again = import_data_dir(data_dir, migrated)
    assert not again.ok and again.imported == []
    assert [s.lane for s in again.skipped] == list(LANES)
    for s in again.skipped:
        assert s.reason.startswith("already in the database (version ")
        assert "not merged, nothing written" in s.reason and not s.benign
    assert {lane: _pg_rows(migrated, lane) for lane in LANES} == before
    assert again.summary().splitlines()[1].startswith("solo:main: skipped: already in")


async def test_a_corrupt_lane_file_is_skipped_and_the_others_still_import(
    data_dir: Path, migrated: str, scratch: Path
) -> None:
    (data_dir / "bad+main.sqlite").write_bytes(bytes(range(256)) * 64)
    (data_dir / "empty+main.sqlite").write_bytes(b"")
    (data_dir / "notes.txt").write_text("not a lane file")
    report = import_data_dir(data_dir, migrated)
    assert not report.ok
    assert sorted(i.lane for i in report.imported) == sorted(LANES)
    skipped = {s.lane: s for s in report.skipped}
    assert set(skipped) == {"bad:main", "empty:main"}
    assert skipped["bad:main"].reason == "corrupt file (file is not a database)"
    assert not skipped["bad:main"].benign and skipped["empty:main"].benign
    assert set(_pg_lanes(migrated)) == set(LANES)
    for lane in LANES:
        _assert_same_lane(data_dir, lane, migrated, scratch)
    lines = report.summary().splitlines()
    assert "bad:main: skipped: corrupt file (file is not a database)" in lines
    assert any(line.startswith("empty:main: ignored: 0-byte file") for line in lines)
    # a lane file whose pages do not read is skipped too (integrity_check on the copy)
    (data_dir / "bad+main.sqlite").unlink()
    broken = data_dir / "solo+main.sqlite"
    raw = bytearray(broken.read_bytes())
    raw[4096 + 8 : 4096 + 200] = b"\xff" * 192  # page 2: garbage in a b-tree page
    broken.write_bytes(bytes(raw))
    with psycopg.connect(migrated, autocommit=True) as db:
        db.execute("DELETE FROM lanes")
    report = import_data_dir(data_dir, migrated)
    skipped = {s.lane: s for s in report.skipped}
    assert skipped["solo:main"].reason.startswith("corrupt file"), skipped
    assert [i.lane for i in report.imported] == [DUO]


async def test_a_lane_that_fails_midway_leaves_nothing_behind(
    data_dir: Path, migrated: str, scratch: Path
) -> None:
    """Tickets are written before receipts: a receipt PostgreSQL refuses (SQLite stored text
    in a REAL column) rolls the whole lane back; the other lane is imported."""
    db = sqlite3.connect(data_dir / "solo+main.sqlite")
    with db:
        db.execute(
            "UPDATE receipts SET created_at = 'soon' "
            "WHERE rowid = (SELECT max(rowid) FROM receipts)"
        )
    db.close()
    report = import_data_dir(data_dir, migrated)
    [skip] = report.skipped
    assert skip.lane == SOLO and skip.reason.startswith("database error (22P02")
    assert skip.reason.endswith("; nothing written") and "password" not in skip.reason
    assert set(_pg_lanes(migrated)) == {DUO}
    _assert_same_lane(data_dir, DUO, migrated, scratch)


async def test_an_unmigrated_database_is_refused_before_anything(
    data_dir: Path, pg_dsn: str
) -> None:
    with pytest.raises(StoreError, match=r"lacks migration .*lane-coordinator migrate"):
        import_data_dir(data_dir, pg_dsn)
    with psycopg.connect(pg_dsn) as db:
        row = db.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
        assert row == (0,)  # no schema was created
    migrate(pg_dsn)  # and the data dir's lock was released: the import now runs
    assert import_data_dir(data_dir, pg_dsn).ok


async def test_a_running_server_keeps_its_data_dir(tmp_path: Path, migrated: str) -> None:
    data = tmp_path / "data"
    await _build(data)
    srv = await start_running(data, config=CONFIG, clock=TestManualClock())
    try:
        with pytest.raises(ConfigError, match="in use by another lane-coordinator"):
            import_data_dir(data, migrated)
    finally:
        await srv.stop()
    assert _pg_lanes(migrated) == {}
    with pytest.raises(ConfigError, match="not a directory"):
        import_data_dir(tmp_path / "missing", migrated)


async def test_an_empty_lane_in_the_database_is_filled_one_with_content_refused(
    data_dir: Path, migrated: str, scratch: Path
) -> None:
    """A lanes row with nothing in it (a replica that knew the lane by name) takes the
    import, at a version above its own so such a replica reloads; any content refuses it."""
    with psycopg.connect(migrated, autocommit=True) as db:
        db.execute("INSERT INTO lanes (lane, version, last_now) VALUES (%s, 100000, 5.0)", (SOLO,))
        db.execute("INSERT INTO lanes (lane) VALUES (%s)", (DUO,))
        db.execute(
            "INSERT INTO incidents (lane, id, kind, at, detail) VALUES (%s, 1, 'k', 1.0, '{}')",
            (DUO,),
        )
    duo_before = _pg_rows(migrated, DUO)
    report = import_data_dir(data_dir, migrated)
    assert [i.lane for i in report.imported] == [SOLO]
    [skip] = report.skipped
    assert skip.lane == DUO and skip.reason == (
        "already in the database (version 0: 1 incidents); not merged, nothing written"
    )
    assert _pg_rows(migrated, DUO) == duo_before
    want, got = _sqlite_rows(data_dir, SOLO, scratch), _pg_rows(migrated, SOLO)
    assert got["head"][0] == 100001 and report.imported[0].version == 100001
    assert got["head"][1:] == want["head"][1:]  # the file's last_now is later than 5.0
    for table in TABLES:
        assert got[table] == want[table], table


# The tickets columns of a lane file before migration 0006 (no in-flight columns).
OLD_TICKET_COLUMNS = TICKET_COLUMNS.split(", submitted_at")[0]


def _old_lane_file(path: Path) -> None:
    """A lane file an old coordinator left: schema 0001 (no verdict column, no lane_head)."""
    s = SqliteLaneStore(path, "old:main", max_migration=1)
    s.open()
    s.close()
    db = sqlite3.connect(path)
    with db:
        db.execute(
            f"INSERT INTO tickets ({OLD_TICKET_COLUMNS}) VALUES ('t1', 1, 'held', 'mA', 'cA', 'p', "
            "'s', 'h', 10.0, 60.0, 10.0, 10.0, 70.0, NULL, 1, NULL, NULL, NULL, NULL, NULL)"
        )
        db.execute(
            "INSERT INTO receipts (receipt_id, ticket_id, phase, machine_id, payload, "
            "content_hash, created_at) VALUES ('r1', 't1', 'lease-acquired', 'mA', '{}', "
            "'sha256:00', 11.0)"
        )
        db.execute("INSERT INTO projects VALUES ('p', 1, 10.0)")
        db.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)", [("last_fence", "1"), ("next_seq", "2")]
        )
        for at in (1.0, 2.0, 3.0):  # ids 1..3, then the newest deleted: AUTOINCREMENT says 3
            db.execute(
                "INSERT INTO incidents (kind, at, detail) VALUES ('k', ?, 'not json')", (at,)
            )
        db.execute("DELETE FROM incidents WHERE id = 3")
    db.close()


async def test_an_older_lane_file_imports_as_served_and_stays_as_it_was(
    tmp_path: Path, migrated: str, scratch: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _old_lane_file(data / "old+main.sqlite")
    before = _digests(data)
    report = import_data_dir(data, migrated, lanes=["old:main", "gone:main", "Bad"])
    assert [i.lane for i in report.imported] == ["old:main"]
    assert {s.lane: s.reason for s in report.skipped} == {
        "Bad": "not a lane name (route:account)",
        "gone:main": f"no lane file gone+main.sqlite in {data}",
    }
    assert _digests(data) == before
    db = sqlite3.connect(_copy(data, "old:main", scratch))  # the file is still at 0001
    assert db.execute("SELECT max(version) FROM schema_migrations").fetchone() == (1,)
    db.close()
    head = _pg_rows(migrated, "old:main")["head"]
    assert head == (0, None, None, 1, 2, 3)  # 0001 had no lane_head; the next incident is 4
    with psycopg.connect(migrated) as pgdb:
        [detail] = pgdb.execute("SELECT DISTINCT detail FROM incidents").fetchone() or [None]
        assert detail == "not json"  # the text itself, not what it reads as
    sq, pg = _sqlite_copy(data, "old:main", scratch), _pg(migrated, "old:main")
    try:
        assert _reads(pg) == _reads(sq)
        assert sq.load().last_fence == 1 and sq.recent_receipts(1)[0].content_hash_verified is None
        assert [i for i, _ in pg.incidents(ALL)] == [2, 1]
    finally:
        sq.close()
        pg.close()


def test_the_report_is_ok_only_when_every_lane_was_imported(tmp_path: Path) -> None:
    report = ImportReport(tmp_path)
    assert report.ok and report.summary() == f"no lane files in {tmp_path}"
    report.skipped.append(LaneSkipped("a:b", "0-byte file", benign=True))
    assert report.ok
    report.skipped.append(LaneSkipped("a:a", "corrupt file (x)"))
    assert not report.ok
    assert report.summary() == "a:a: skipped: corrupt file (x)\na:b: ignored: 0-byte file"
