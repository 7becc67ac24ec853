"""Power loss under the real server: every acknowledged operation survives (issue 12).

`lane-coordinator serve` runs as it ships (SQLite, WAL, synchronous=FULL, its own fsyncs and
directory fsyncs) on a simulated disk (tests/powerloss/shim.c, an LD_PRELOAD library): the
disk holds what was fsynced and no more. Clients cycle acquire → await → heartbeat → release,
every attempt in a `Ledger`; at a random moment the server is killed (SIGKILL) and the data
dir becomes what the disk holds, unsynced writes and unsynced directory entries dropped
("drop") or a random part of them kept ("torn"); the server restarts on it and the clients go
on. New lanes (new files) are created every round, so some crashes hit a lane file being
born. At the end `check` (tests/harness/history.py) holds the acknowledged replies against
what the server has: nothing acknowledged may be missing.

Controls, so that a pass means something: the same load with the one setting that makes
commits durable turned down (synchronous=NORMAL, through tests/powerloss/launch.py) loses
acknowledged operations at a power loss while kill -9 alone loses none; and a disk that
ignores directory fsyncs loses the new lanes. POWERLOSS_SEED=<n> replays a run's choices.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import sys
from pathlib import Path

from coordinator.protocol.names import lane_file_name
from tests.harness import CoordinatorProcess, StartCoordinator, make_config
from tests.harness.history import Ledger, Report, check, read_views
from tests.harness.load import Target, spread
from tests.powerloss.disk import ShimRun
from tests.powerloss.workload import start_load

ROUNDS = 9  # power losses in the main test
CLIENTS = 6
BASE_LANES = ["solo:base", "duo:base"]  # routes of make_config(): solo cap 1, duo cap 2


def _seed() -> int:
    return int(os.environ.get("POWERLOSS_SEED", random.randrange(2**31)))


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "LANE_COORDINATOR_TOKEN"}


def _round_lanes(k: int) -> list[str]:
    return [*BASE_LANES, f"solo:new{k}", f"duo:new{k}"]


async def _start(
    start: StartCoordinator, run: ShimRun | None, data_dir: Path, **kwargs: object
) -> CoordinatorProcess:
    env = run.env(_env()) if run is not None else _env()
    return await asyncio.to_thread(
        start, data_dir, config=make_config(), env=env, log_level="warning", **kwargs
    )


async def _verify(srv: CoordinatorProcess, ledger: Ledger) -> Report:
    views = await read_views(srv.url, srv.token, ledger.lanes)
    return check(ledger, views)


def _tail(srv: CoordinatorProcess) -> str:
    return "\n".join(srv.lines[-30:])


async def _power_fails(srv: CoordinatorProcess, run: ShimRun, how: str, rng: random.Random) -> str:
    """Let the server run into its armed crash point (or, `how` "timed", kill it after a
    random time); returns what happened."""
    if how == "timed":
        await asyncio.sleep(rng.uniform(0.3, 0.9))
    else:
        for _ in range(60):  # 3 s for the crash point to come
            if srv.proc.poll() is not None:
                break
            await asyncio.sleep(0.05)
    crashed = srv.proc.poll() is not None
    await asyncio.to_thread(srv.kill)  # SIGKILL unless it is dead already, then reap
    fired = run.stats().crashed
    return f"crash point {fired}" if crashed and fired else f"SIGKILL ({how})"


async def test_every_acknowledged_operation_survives_power_loss(
    shim_lib: Path, tmp_path: Path, start_coordinator: StartCoordinator
) -> None:
    seed = _seed()
    rng = random.Random(seed)
    data = tmp_path / "data"
    run = ShimRun(shim_lib, data, tmp_path / "state")
    ledger = Ledger()
    srv = await _start(start_coordinator, run, data)
    target = Target([srv.url], srv.token)
    load = start_load(target, _round_lanes(0), CLIENTS, ledger, seed)
    notes: list[str] = []
    how = "timed"
    try:
        for k in range(1, ROUNDS + 1):
            what = await _power_fails(srv, run, how, rng)
            stats, anomalies = run.stats(), run.anomalies()
            assert anomalies == [], anomalies
            assert stats.file_syncs > 0, f"round {k}: the shim saw no fsync: {stats}"
            mode = "drop" if k % 2 else "torn"
            rec = run.power_loss(mode, rng)
            notes.append(f"round {k}: {what}, {stats.file_syncs} file and {stats.dir_syncs} "
                         f"dir fsyncs; {rec.summary()}")  # fmt: skip
            srv = await _start(start_coordinator, run, data)
            # the next round's power loss: after a random time, or at the nth directory fsync
            # (lane files are born on the new lanes), or at the nth file fsync (commits)
            how = ("timed", "dir", "file")[k % 3]
            if how != "timed":
                run.arm_crash(how, rng.randint(1, 6) if how == "dir" else rng.randint(1, 400))
            target.urls = [srv.url]
            load.move(spread(_round_lanes(k), CLIENTS))
        await asyncio.sleep(0.5)
    except BaseException:
        await load.abort()
        raise
    late = await load.finish(timeout=60.0)
    report = await _verify(srv, ledger)
    srv.kill9()
    leftovers = sorted(p.name for p in data.iterdir() if ".tmp-" in p.name)
    notes.append(f"temporary files left in the data dir: {leftovers}")
    summary = "\n".join([*notes, report.summary(f"power loss x{ROUNDS} (seed {seed})")])
    print(summary)
    assert late == [], f"clients still running 60 s after the stop: {late}"
    assert load.problems == [], f"{load.problems[:5]}\n{_tail(srv)}"
    assert report.ok, f"{summary}\n{report.explain()}"
    assert report.lost == 0
    assert report.acknowledged > 200, summary  # the load really ran
    assert load.cycles > 50, summary
    assert any("crash point" in n for n in notes), summary  # exact points were hit too


async def _control_run(
    start: StartCoordinator,
    run: ShimRun,
    seconds: float,
    lanes: list[str],
    command: list[str] | None = None,
) -> tuple[Ledger, CoordinatorProcess]:
    """The load for `seconds` on a server on `run`'s disk, then SIGKILL."""
    ledger = Ledger()
    srv = await _start(start, run, run.directory, command=command)
    load = start_load(Target([srv.url], srv.token), lanes, CLIENTS, ledger)
    try:
        await asyncio.sleep(seconds)
        await asyncio.to_thread(srv.kill9)
    finally:
        await load.abort()
    return ledger, srv


async def _after_restart(
    start: StartCoordinator, data_dir: Path, ledger: Ledger
) -> tuple[Report, CoordinatorProcess]:
    srv = await _start(start, None, data_dir)
    try:
        return await _verify(srv, ledger), srv
    finally:
        srv.kill9()


async def test_control_synchronous_normal_loses_acknowledged_operations(
    shim_lib: Path, tmp_path: Path, start_coordinator: StartCoordinator
) -> None:
    """The same server with PRAGMA synchronous = NORMAL: a commit returns before it is on
    the disk. kill -9 (the page cache survives) loses nothing, so a kill -9 campaign cannot
    see it; the simulated power loss must lose acknowledged operations."""
    run = ShimRun(shim_lib, tmp_path / "data", tmp_path / "state")
    command = [sys.executable, "-m", "tests.powerloss.launch", "NORMAL"]
    ledger, srv = await _control_run(start_coordinator, run, 1.5, _round_lanes(0), command=command)
    assert "powerloss-launch: synchronous=NORMAL" in srv.text, _tail(srv)
    assert run.anomalies() == []
    assert len(ledger.acknowledged()) > 50, "the load did not run"
    page_cache = tmp_path / "page-cache"
    shutil.copytree(run.directory, page_cache)  # what kill -9 alone leaves
    rec = run.power_loss("drop")
    killed, _ = await _after_restart(start_coordinator, page_cache, ledger)
    lost, _ = await _after_restart(start_coordinator, run.directory, ledger)
    print(killed.summary("synchronous=NORMAL, kill -9"))
    print(lost.summary("synchronous=NORMAL, power loss") + f"; {rec.summary()}")
    assert killed.lost == 0, killed.explain()
    assert lost.lost > 0, "the simulator let synchronous=NORMAL keep every acknowledgement"


async def test_control_ignored_directory_fsync_loses_new_lanes(
    shim_lib: Path, tmp_path: Path, start_coordinator: StartCoordinator
) -> None:
    """A disk that ignores directory fsyncs: a new lane file is complete and fsynced, but its
    name never reaches the disk: after the power loss the lanes are gone and their
    acknowledged operations with them. Proves the simulator drops unsynced names."""
    run = ShimRun(shim_lib, tmp_path / "data", tmp_path / "state", mode="nodirsync")
    ledger, _ = await _control_run(start_coordinator, run, 1.0, _round_lanes(0))
    assert run.anomalies() == []
    assert run.stats().file_syncs > 0
    assert len(ledger.acknowledged()) > 20, "the load did not run"
    rec = run.power_loss("drop")
    lane_files = {lane_file_name(lane) for lane in _round_lanes(0)}
    assert lane_files <= set(rec.vanished), rec.summary()  # fsynced, but never named durably
    report, _ = await _after_restart(start_coordinator, run.directory, ledger)
    print(report.summary("directory fsync ignored, power loss") + f"; {rec.summary()}")
    assert report.lost > 0, "the simulator kept lane files whose names were never synced"
