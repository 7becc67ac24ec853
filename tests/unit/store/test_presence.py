"""Machine presence in the store: the SQLite presence file (never a lane file, private,
created complete) and `Presence`'s write-through (first sighting at once, then throttled per
machine and lane; failures logged, never raised; `view` from the store plus this process's
newer sightings, bounded by the hour and MACHINES_LISTED_MAX; `close` writes the rest)."""

from __future__ import annotations

import stat
from collections.abc import Sequence
from pathlib import Path

import pytest
import structlog

from coordinator.constants import PRESENCE_RECENT_SECONDS, SEEN_WRITE_SECONDS
from coordinator.errors import StoreError
from coordinator.http import presence as presence_module
from coordinator.http.presence import Presence
from coordinator.protocol.names import lane_from_file_name
from coordinator.store.presence import (
    PRESENCE_FILE_NAME,
    Sighting,
    SqlitePresenceStore,
    presence_store_for,
)
from tests.unit.kit import T0

SOLO, DUO = "solo:main", "duo:main"


@pytest.fixture
def store(tmp_path: Path) -> SqlitePresenceStore:
    return SqlitePresenceStore(tmp_path / PRESENCE_FILE_NAME)


class FailingStore:
    """A presence store whose every call fails (a full disk, a lost database)."""

    def __init__(self) -> None:
        self.calls = 0

    def record(self, sightings: Sequence[Sighting], prune_before: float) -> None:
        self.calls += 1
        raise StoreError("disk full")

    def recent(self, since: float, limit: int) -> list[Sighting]:
        self.calls += 1
        raise StoreError("disk full")

    def close(self) -> None:
        pass


# ---------------------------------------------------------------- the SQLite presence file


def test_the_presence_file_is_never_a_lane_file_and_is_private(
    tmp_path: Path, store: SqlitePresenceStore
) -> None:
    assert lane_from_file_name(PRESENCE_FILE_NAME) is None
    assert not tmp_path.joinpath(PRESENCE_FILE_NAME).exists()  # made on first use only
    store.record([Sighting("mA", SOLO, T0)], T0 - 3600)
    store.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert PRESENCE_FILE_NAME in names and not [n for n in names if ".tmp-" in n]
    for name in names:
        assert lane_from_file_name(name) is None
        assert stat.S_IMODE(tmp_path.joinpath(name).stat().st_mode) == 0o600


def test_rows_round_trip_keep_the_later_time_and_are_pruned(
    store: SqlitePresenceStore,
) -> None:
    store.record([Sighting("mA", SOLO, T0 + 10), Sighting("mA", DUO, T0)], T0 - 3600)
    store.record([Sighting("mA", SOLO, T0 + 5), Sighting("mB", "", T0 + 1)], T0 - 3600)
    assert store.recent(T0 - 3600, 10) == [
        Sighting("mA", DUO, T0),
        Sighting("mA", SOLO, T0 + 10),  # the later time stays
        Sighting("mB", "", T0 + 1),
    ]
    assert store.recent(T0 + 1, 10) == [Sighting("mA", SOLO, T0 + 10), Sighting("mB", "", T0 + 1)]
    store.record([Sighting("mC", SOLO, T0 + 7200)], T0 + 3600)  # a write prunes older rows
    assert store.recent(0.0, 10) == [Sighting("mC", SOLO, T0 + 7200)]
    assert store.writes == 5
    store.close()


def test_recent_lists_the_most_recently_seen_machines_only(store: SqlitePresenceStore) -> None:
    store.record([Sighting(f"m{i}", lane, T0 + i) for i in range(5) for lane in (SOLO, DUO)], 0.0)
    rows = store.recent(0.0, 2)
    assert {r.machine_id for r in rows} == {"m3", "m4"} and len(rows) == 4
    store.close()


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / PRESENCE_FILE_NAME
    path.write_bytes(b"not a database at all")
    s = SqlitePresenceStore(path)
    with pytest.raises(StoreError):
        s.record([Sighting("mA", SOLO, T0)], 0.0)
    with pytest.raises(StoreError):
        s.recent(0.0, 10)
    assert path.read_bytes() == b"not a database at all"
    s.close()


def test_the_store_beside_the_lane_store(tmp_path: Path) -> None:
    s = presence_store_for(None, tmp_path)
    assert isinstance(s, SqlitePresenceStore) and s.path == tmp_path / PRESENCE_FILE_NAME
    assert isinstance(presence_store_for("sqlite", tmp_path), SqlitePresenceStore)
    pg = presence_store_for("postgresql://u:secret@127.0.0.1:1/db", None)
    assert "secret" not in repr(pg) and type(pg).__name__ == "PostgresPresenceStore"


# ---------------------------------------------------------------- Presence


async def test_a_first_sighting_is_written_at_once_then_throttled(
    store: SqlitePresenceStore,
) -> None:
    p = Presence(store, None)
    p.saw("mA", T0, SOLO)
    await p.flushed()
    assert store.recent(0.0, 10) == [Sighting("mA", SOLO, T0)]
    for step in range(1, 25):  # a heartbeat every 5 s for 120 s
        p.saw("mA", T0 + 5 * step, SOLO)
        await p.flushed()
    assert store.writes == 1 + int(120 // SEEN_WRITE_SECONDS)  # at 0, 30, 60, 90, 120
    p.saw("mA", T0 + 121, DUO)  # a new lane for the machine: its row is new, written at once
    await p.flushed()
    assert store.writes == 6
    assert [r.machine_id for r in await p.view(T0 + 121)] == ["mA"]
    p.saw("mA", T0 + 125, SOLO)  # held back by the throttle ...
    await p.close()  # ... and written at close
    assert Sighting("mA", SOLO, T0 + 125) in store.recent(0.0, 10)


async def test_view_merges_the_store_and_this_process(tmp_path: Path) -> None:
    one = Presence(SqlitePresenceStore(tmp_path / PRESENCE_FILE_NAME), None)
    two = Presence(SqlitePresenceStore(tmp_path / PRESENCE_FILE_NAME), None)
    one.saw("mA", T0, SOLO)
    one.saw("mA", T0 + 10, SOLO)  # not written yet: only `one` knows
    await one.flushed()
    two.saw("mB", T0 + 20, DUO)
    await two.flushed()
    [b, a] = await two.view(T0 + 30)
    assert (b.machine_id, b.last_seen_at, b.lanes) == ("mB", T0 + 20, [DUO])
    assert (a.machine_id, a.last_seen_at, a.lanes) == ("mA", T0, [SOLO])  # as stored
    assert a.online and a.seconds_since_seen == 30.0
    [_, a] = await one.view(T0 + 30)
    assert a.last_seen_at == T0 + 10  # its own newer sighting
    later = await two.view(T0 + 20 + PRESENCE_RECENT_SECONDS + 1)
    assert later == []  # seen more than an hour ago: not listed
    await one.close()
    await two.close()


async def test_view_lists_at_most_the_limit(
    store: SqlitePresenceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(presence_module, "MACHINES_LISTED_MAX", 3)
    p = Presence(store, None)
    for i in range(6):
        p.saw(f"m{i}", T0 + i, SOLO)
    await p.flushed()
    rows = await p.view(T0 + 10)
    assert [r.machine_id for r in rows] == ["m5", "m4", "m3"]
    assert rows[0].online and not await p.view(T0 + 10_000)
    await p.close()


async def test_a_failing_store_never_fails_a_sighting_or_a_view() -> None:
    failing = FailingStore()
    p = Presence(failing, None)
    with structlog.testing.capture_logs() as logs:
        p.saw("mA", T0, SOLO)
        await p.flushed()
        p.saw("mA", T0 + 1, SOLO)  # the failed row is tried again at its next sighting
        await p.flushed()
        rows = await p.view(T0 + 2)
        await p.close()
    assert [r.machine_id for r in rows] == ["mA"]  # this process's sightings
    assert failing.calls >= 3
    events = [e["event"] for e in logs]
    assert events.count("presence.write_failed") == 1  # rate-limited
    assert events.count("presence.read_failed") == 1
