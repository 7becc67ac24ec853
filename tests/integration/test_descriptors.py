"""Lanes live under a descriptor budget: a quiet lane lets go of its file (its memory and
alarm stay), the least recently used lanes let go first when more lanes than the budget are
busy, and a restart listens at once and wakes the lanes whose deadline passed meanwhile.
(The budget's arithmetic is tests/unit/actor/test_descriptors.py.)"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from coordinator.actor.file_upkeep import FileUpkeep
from coordinator.actor.registry import LaneRegistry
from coordinator.constants import LANE_QUIET_SECONDS
from coordinator.http.middleware import REGISTRY_KEY
from tests.harness import Running, StartServer, TestManualClock
from tests.harness.subproc import CoordinatorProcess
from tests.integration.kit import acquire_body, ticket_body


def lane_fds(data_dir: Path) -> list[str]:
    """This process's descriptors on lane files (the database, -wal, -shm)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(data_dir)) and ".sqlite" in target:
            out.append(target)
    return out


def registry(srv: Running) -> LaneRegistry:
    return srv.app[REGISTRY_KEY]


def upkeep(srv: Running) -> FileUpkeep:
    """The lane files' upkeep (descriptor budget, quiet lanes) of a SQLite server."""
    found = registry(srv).upkeep
    assert isinstance(found, FileUpkeep)
    return found


async def settle(reg: FileUpkeep) -> None:
    for _ in range(200):
        if not reg.suspending:
            return
        await asyncio.sleep(0.01)


async def test_a_quiet_lane_holds_no_descriptor_and_reopens_on_its_next_call(
    start_server: StartServer,
) -> None:
    clock = TestManualClock()
    srv = await start_server(clock=clock)
    held = await srv.ok("acquire", acquire_body("solo:quiet"))
    tid = held["ticket"]["ticketId"]
    assert lane_fds(srv.data_dir)
    clock.advance(LANE_QUIET_SECONDS + 1)
    await upkeep(srv).suspend_quiet()
    assert lane_fds(srv.data_dir) == []
    assert "solo:quiet" in registry(srv).open_lanes()  # its memory (and alarm) stay
    hb = await srv.ok("heartbeat", ticket_body("solo:quiet", tid))
    assert hb["refreshed"] is True
    assert lane_fds(srv.data_dir)
    st = await srv.ok("status", {"lane": "solo:quiet"})
    assert [t["ticketId"] for t in st["held"]] == [tid]


async def test_busy_lanes_beyond_the_budget_take_turns_holding_their_files(
    start_server: StartServer,
) -> None:
    srv = await start_server(clock=TestManualClock(), max_lanes=100)
    reg = upkeep(srv)
    reg.lru.budget = 3
    tickets = {}
    for i in range(10):
        lane = f"solo:busy{i}"
        tickets[lane] = (await srv.ok("acquire", acquire_body(lane)))["ticket"]["ticketId"]
        await settle(reg)
        assert len(set(p.split(".sqlite")[0] for p in lane_fds(srv.data_dir))) <= 3
    for lane, tid in tickets.items():  # every lane still answers from its file
        rel = await srv.ok("release", ticket_body(lane, tid, outcome="completed"))
        assert rel["released"] is True
        await settle(reg)
    assert len(set(p.split(".sqlite")[0] for p in lane_fds(srv.data_dir))) <= 3


async def test_a_restart_wakes_only_the_lanes_whose_deadline_passed(
    start_server: StartServer, tmp_path: Path
) -> None:
    clock = TestManualClock()
    data = tmp_path / "data"
    first = await start_server(clock=clock, data_dir=data)
    await first.ok("acquire", acquire_body("solo:short", leaseSeconds=30))
    await first.ok("acquire", acquire_body("solo:long", leaseSeconds=600))
    await first.stop()
    clock.advance(60)  # solo:short's lease ran out while the server was down
    second = await start_server(clock=clock, data_dir=data)
    reg = registry(second)
    deadline = time.monotonic() + 10
    while "solo:short" not in reg.open_lanes() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert "solo:short" in reg.open_lanes()  # opened by the re-arm, no call needed
    assert "solo:long" not in reg.open_lanes()  # not due: only its deadline is kept
    hist = await second.ok("history", {"lane": "solo:short"})
    assert [e["outcome"] for e in hist["entries"]] == ["expired"]
    clock.advance(600)
    while "solo:long" not in reg.open_lanes() and time.monotonic() < deadline + 10:
        await asyncio.sleep(0.02)
    assert "solo:long" in reg.open_lanes()


LOW_NOFILE = (
    "import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128)); "
    "from coordinator.cli import main; sys.exit(main())"
)


def test_more_busy_lanes_than_descriptors_allow_all_work(tmp_path: Path) -> None:
    """60 lanes with a live ticket each under `ulimit -n 128` (room for about 10 open lane
    files): every call answers, because quiet lanes take turns holding their files."""
    from tests.harness.config import make_config

    srv = CoordinatorProcess(
        tmp_path / "data",
        config=make_config(max_lanes=1000),
        command=[sys.executable, "-c", LOW_NOFILE],
    )
    try:
        tickets = {}
        for i in range(60):
            lane = f"solo:many{i}"
            tickets[lane] = srv.op("acquire", acquire_body(lane))["ticket"]["ticketId"]
        for lane, tid in tickets.items():
            assert srv.op("heartbeat", ticket_body(lane, tid))["refreshed"] is True
            rel = srv.op("release", ticket_body(lane, tid, outcome="completed"))
            assert rel["released"] is True
        [budget] = srv.events("lanes.descriptor_budget")
        assert budget["open_file_limit"] == 128
    finally:
        srv.stop()
    assert "EMFILE" not in srv.text and "cannot be opened" not in srv.text


async def test_temporary_files_a_crash_left_are_removed_at_start(
    start_server: StartServer, tmp_path: Path
) -> None:
    """A power loss while a first acquire created a lane file can leave its temporary file
    (and side files); the next start removes them and nothing else."""
    data = tmp_path / "data"
    first = await start_server(data_dir=data)
    await first.ok("acquire", acquire_body("solo:kept"))
    await first.stop()
    left = [".solo+gone.sqlite.tmp-4242-0badf00d", ".solo+gone.sqlite.tmp-4242-0badf00d-wal"]
    for name in left:
        (data / name).write_bytes(b"partial")
    second = await start_server(data_dir=data)
    names = sorted(p.name for p in data.iterdir())
    assert not [n for n in names if ".tmp-" in n], names
    assert "solo+kept.sqlite" in names
    st = await second.ok("status", {"lane": "solo:kept"})
    assert len(st["held"]) == 1
