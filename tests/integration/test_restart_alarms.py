"""A restart over many lane files listens without opening them: each file's next deadline
is read on its own, and every alarm that fell due while the server was down fires on its
own (counted by `lanes_expiries_total`, no call to any lane); the lanes not due stay closed.
After a clean stop the deadlines come from the index the stop wrote; without it (as after a
crash) from the files. Shortly before a quiet lane's alarm, its file is opened again, so
the alarm's commit does not wait for it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from coordinator.actor.descriptors import PREOPEN_SECONDS
from coordinator.constants import LANE_QUIET_SECONDS
from coordinator.store.deadline_index import INDEX_NAME
from tests.harness import Running, StartServer, TestManualClock
from tests.integration.kit import acquire_body
from tests.integration.test_descriptors import lane_fds, registry, upkeep

LANES = 200
DUE_EVERY = 5  # one lane in five has a short lease and a waiter
EXPIRIES = "lanes_expiries_total"


async def expiries(srv: Running) -> float:
    text = (await srv.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith(EXPIRIES + " "):
            return float(line.split()[1])
    return 0.0


@pytest.mark.parametrize("index", ["clean stop: deadline index", "no index: every file read"])
async def test_due_alarms_fire_after_a_restart_over_many_lanes_without_any_call(
    start_server: StartServer, tmp_path: Path, index: str
) -> None:
    clock = TestManualClock()
    data = tmp_path / "data"
    first = await start_server(clock=clock, data_dir=data, max_lanes=LANES + 10)
    due = set()
    for i in range(LANES):
        lane = f"solo:r{i}"
        short = i % DUE_EVERY == 0
        await first.ok("acquire", acquire_body(lane, leaseSeconds=30 if short else 600))
        if short:
            due.add(lane)
            waiter = acquire_body(lane, machine="mB", claim="cB", project="p2")
            assert (await first.ok("acquire", waiter))["granted"] is False
    await first.stop()
    assert not [p for p in data.iterdir() if p.name.endswith(("-wal", "-shm"))]
    assert (data / INDEX_NAME).is_file()  # written by the clean stop
    if index.startswith("no index"):
        (data / INDEX_NAME).unlink()  # as after a crash: the start reads every lane file
    clock.advance(60)  # the short leases ran out while the server was down
    second = await start_server(clock=clock, data_dir=data, max_lanes=LANES + 10)
    end = time.monotonic() + 60  # generous: a loaded machine
    while await expiries(second) < len(due):
        assert time.monotonic() < end, f"{await expiries(second)} of {len(due)} fired"
        await asyncio.sleep(0.05)
    reg = registry(second)
    for _ in range(200):  # the sweep over every file ends just after the last due lane
        if not [t for t in reg.upkeep.tasks if t.get_name() == "lane-rearm" and not t.done()]:
            break
        await asyncio.sleep(0.05)
    assert await expiries(second) == len(due)
    assert set(reg.open_lanes()) == due  # the other lanes' files were only read
    # reading the deadlines left no side files behind (the lanes not opened have none)
    names = {p.name for p in data.iterdir()}
    assert "solo+r1.sqlite-shm" not in names and "solo+r1.sqlite-wal" not in names
    some = sorted(due)[0]
    st = await second.ok("status", {"lane": some})
    assert [t["machineId"] for t in st["held"]] == ["mB"]  # the waiter was promoted


async def test_a_quiet_lane_opens_its_file_again_just_before_its_alarm(
    start_server: StartServer,
) -> None:
    clock = TestManualClock()
    srv = await start_server(clock=clock)
    held = await srv.ok("acquire", acquire_body("solo:soon", leaseSeconds=LANE_QUIET_SECONDS + 20))
    expires = float(held["ticket"]["leaseExpiresAt"])
    clock.advance(LANE_QUIET_SECONDS + 1)
    await upkeep(srv).suspend_quiet()
    assert lane_fds(srv.data_dir) == []  # quiet: its file is closed
    clock.set(expires - PREOPEN_SECONDS / 2)  # the alarm is close, not due yet
    end = time.monotonic() + 10
    while not lane_fds(srv.data_dir):
        assert time.monotonic() < end, "the file was not opened before the alarm"
        await asyncio.sleep(0.01)
    st = await srv.ok("status", {"lane": "solo:soon"})
    assert len(st["held"]) == 1  # nothing expired early
    clock.set(expires + 1)
    end = time.monotonic() + 10
    while (await srv.ok("status", {"lane": "solo:soon"}))["held"]:
        assert time.monotonic() < end, "the alarm did not fire"
        await asyncio.sleep(0.01)
