"""Presence (`GET /v1/machines`, the overview's `machines`) and the evidence's machines seen
live in the store: a restart forgets neither, the evidence still lists a machine after its
lane's actor closed as idle, nothing older than an hour is listed, and a heartbeat loop writes
its rows only every SEEN_WRITE_SECONDS."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coordinator.constants import (
    EVIDENCE_RECENT_SECONDS,
    LANE_IDLE_CLOSE_SECONDS,
    PRESENCE_RECENT_SECONDS,
    SEEN_WRITE_SECONDS,
)
from coordinator.http.middleware import PRESENCE_KEY, REGISTRY_KEY
from coordinator.store.presence import PRESENCE_FILE_NAME, SqlitePresenceStore
from tests.harness import Running, TestManualClock, start_running
from tests.integration.kit import DUO, FREE, SOLO, acquire_body, ticket_body


async def _machines(server: Running) -> dict[str, list[str]]:
    r = await server.get("/v1/machines")
    assert r.status == 200, r.text
    return {m["machineId"]: m["lanes"] for m in r["machines"]}


async def _seen(server: Running, lane: str = SOLO) -> dict[str, float]:
    r = await server.get("/v1/evidence", params={"lane": lane})
    assert r.status == 200, r.text
    ev = r["coordinatorEvidence"]
    assert ev["distinctMachines"] == len(ev["machinesSeen"])
    return {m["machineId"]: m["lastSeenAt"] for m in ev["machinesSeen"]}


class Servers:
    """Servers on one data dir, one at a time; each is stopped exactly once."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.current: Running | None = None

    async def start(self) -> Running:
        assert self.current is None
        self.current = await start_running(self.data_dir, clock=TestManualClock())
        return self.current

    async def restart(self) -> Running:
        """Stop the server and start another on the same data dir, its clock where the
        stopped one's was."""
        old = self.current
        assert old is not None
        now = old.clock.now()
        self.current = None
        await old.stop()
        self.current = await start_running(self.data_dir, clock=TestManualClock(now))
        return self.current

    async def stop(self) -> None:
        if self.current is not None:
            old, self.current = self.current, None
            await old.stop()


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[Servers]:
    s = Servers(tmp_path / "d")
    yield s
    await s.stop()


async def test_presence_survives_a_restart(servers: Servers) -> None:
    data = servers.data_dir
    one = await servers.start()
    await one.ok("acquire", acquire_body(SOLO, machine="mA"))
    await one.ok("acquire", acquire_body(DUO, machine="mA"))
    await one.ok("acquire", acquire_body(FREE, machine="mB", claim=None))
    await one.ok("status", {"lane": SOLO, "machineId": "mC"})
    assert await _machines(one) == {"mA": [DUO, SOLO], "mB": [FREE], "mC": [SOLO]}
    assert (data / PRESENCE_FILE_NAME).is_file()

    two = await servers.restart()
    assert await _machines(two) == {"mA": [DUO, SOLO], "mB": [FREE], "mC": [SOLO]}
    r = await two.get("/v1/overview")
    assert r.status == 200 and {m["machineId"] for m in r["machines"]} == {"mA", "mB", "mC"}
    two.clock.advance(PRESENCE_RECENT_SECONDS + 1)
    assert await _machines(two) == {}  # seen more than an hour ago


async def test_presence_sightings_held_back_by_the_throttle_are_written_at_stop(
    servers: Servers,
) -> None:
    one = await servers.start()
    t = (await one.ok("acquire", acquire_body(SOLO)))["ticket"]["ticketId"]
    one.clock.advance(5)
    await one.ok("heartbeat", ticket_body(SOLO, t))  # held back: written at stop
    seen_at = one.clock.now()
    two = await servers.restart()
    r = await two.get("/v1/machines")
    [m] = r["machines"]
    assert m["machineId"] == "mA" and m["lastSeenAt"] == seen_at


async def test_evidence_lists_a_machine_after_its_lane_closed_and_after_a_restart(
    servers: Servers,
) -> None:
    one = await servers.start()
    a = (await one.ok("acquire", acquire_body(SOLO, machine="mA")))["ticket"]["ticketId"]
    one.clock.advance(1)
    b = (await one.ok("acquire", acquire_body(SOLO, machine="mB", prompt="h2")))["ticket"]
    one.clock.advance(1)
    await one.ok("release", ticket_body(SOLO, a, outcome="completed"))
    await one.ok("release", ticket_body(SOLO, b["ticketId"], machine="mB", outcome="completed"))
    t0 = one.clock.now() - 2
    assert await _seen(one) == {"mA": t0 + 2, "mB": t0 + 2}  # in memory: the latest calls

    registry = one.app[REGISTRY_KEY]
    one.clock.advance(LANE_IDLE_CLOSE_SECONDS)
    await registry.close_idle()
    assert SOLO not in registry.open_lanes()
    assert await _seen(one) == {"mA": t0, "mB": t0 + 1}  # reopened: the stored times

    two = await servers.restart()
    assert await _seen(two) == {"mA": t0, "mB": t0 + 1}
    two.clock.advance(EVIDENCE_RECENT_SECONDS - (two.clock.now() - t0) + 0.5)
    assert await _seen(two) == {"mB": t0 + 1}  # mA was seen (stored) just over an hour ago
    two.clock.advance(1)
    assert await _seen(two) == {}
    three = await servers.restart()
    assert await _seen(three) == {}


def _stored_seen(lane_file: Path) -> dict[str, float]:
    db = sqlite3.connect(f"file:{lane_file}?mode=ro", uri=True)
    try:
        return dict(db.execute("SELECT machine_id, last_seen_at FROM machines_seen").fetchall())
    finally:
        db.close()


async def test_a_heartbeat_loop_writes_machine_rows_only_every_throttle_interval(
    server: Running,
) -> None:
    presence = server.app[PRESENCE_KEY]
    store = presence.store
    assert isinstance(store, SqlitePresenceStore)
    t = (await server.ok("acquire", acquire_body(SOLO)))["ticket"]["ticketId"]
    t0 = server.clock.now()
    stored: list[float] = []
    for _ in range(24):  # a heartbeat every 5 s for 120 s
        server.clock.advance(5)
        await server.ok("heartbeat", ticket_body(SOLO, t))
        stored.append(_stored_seen(server.lane_file(SOLO))["mA"] - t0)
    await presence.flushed()
    interval = SEEN_WRITE_SECONDS
    assert sorted(set(stored)) == [0.0, interval, 2 * interval, 3 * interval, 4 * interval]
    assert store.writes == 5  # presence: (mA, solo:main) at 0, 30, 60, 90 and 120 s
    assert (await _seen(server))["mA"] == t0 + 120  # evidence in memory stays exact
