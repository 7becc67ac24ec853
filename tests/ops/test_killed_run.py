"""A test run ended by SIGTERM (a CI time limit, `timeout`, `kill`) or SIGINT (Ctrl-C,
`kill -INT`) leaves nothing running: tests.harness.cleanup ends the throwaway PostgreSQL
cluster (postmaster gone, temp dir removed) and the coordinator subprocesses, those a fixture
started and those a test started itself (no teardown ends them), before the run dies.

A small pytest session with the real harness runs in a subprocess (tests.harness.inner): its
test takes the session's `postgres` cluster, starts two `lane-coordinator serve` subprocesses,
says so in a file, then sleeps. The test here signals that pytest process and looks.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness.inner import InnerRun
from tests.harness.postgres import _alive

READY_TIMEOUT = 180.0  # initdb, the cluster's start and two coordinators, on a shared machine

INNER_TEST = """
import json
import os
import time
from pathlib import Path

from tests.harness import CoordinatorProcess, StartCoordinator
from tests.harness.postgres import PostgresCluster


def test_hold(
    postgres: PostgresCluster, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    fixtured = start_coordinator(tmp_path / "fixtured")  # the fixture's teardown would end it
    bare = CoordinatorProcess(tmp_path / "bare")  # nothing but the cleanup registry ends it
    info = {
        "pytest": os.getpid(),
        "postmaster": postgres.postmaster_pid(),
        "cluster_root": str(postgres.root),
        "data_dir": str(postgres.data_dir),
        "coordinators": [fixtured.pid, bare.pid],
    }
    ready = Path(os.environ["KILLED_RUN_READY"])
    ready.with_suffix(".tmp").write_text(json.dumps(info))
    ready.with_suffix(".tmp").rename(ready)
    time.sleep(600)
"""


def _pids_naming(text: str) -> list[int]:
    """The processes whose command line contains `text` (a postmaster names its data dir)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if text in cmdline and _alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def _wait_ready(run: InnerRun, ready: Path) -> dict[str, Any]:
    deadline = time.monotonic() + READY_TIMEOUT
    while not ready.exists():
        if run.proc.poll() is not None:
            raise AssertionError(f"the inner run ended before it was ready:\n{run.output}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the inner run not ready after {READY_TIMEOUT} s:\n{run.output}")
        time.sleep(0.05)
    info: dict[str, Any] = json.loads(ready.read_text())
    return info


def _leftovers(info: dict[str, Any]) -> list[str]:
    """What still runs or exists of what the inner run started."""
    left: list[str] = []
    if _alive(info["postmaster"]):
        left.append(f"postmaster {info['postmaster']}")
    left += [f"process {pid} naming the cluster" for pid in _pids_naming(info["cluster_root"])]
    if Path(info["cluster_root"]).exists():
        left.append(f"cluster temp dir {info['cluster_root']}")
    left += [f"coordinator {pid}" for pid in info["coordinators"] if _alive(pid)]
    return left


def _end_leftovers(info: dict[str, Any]) -> None:
    """Whatever the inner run left (the bug this tests): ended here, so that a failing run of
    this test leaves nothing either."""
    for pid in [info["postmaster"], *_pids_naming(info["cluster_root"]), *info["coordinators"]]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(info["cluster_root"], ignore_errors=True)


@pytest.mark.parametrize(
    ("sig", "exit_code"),
    [
        (signal.SIGTERM, -signal.SIGTERM),  # dies of the signal: the status says "killed"
        (signal.SIGINT, 2),  # KeyboardInterrupt: pytest's "Interrupted", ExitCode.INTERRUPTED
    ],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_killed_run_leaves_nothing_running(
    tmp_path: Path, sig: signal.Signals, exit_code: int
) -> None:
    ready = tmp_path / "ready.json"
    run = InnerRun(
        tmp_path / "inner",
        {"test_hold.py": INNER_TEST},
        "test_hold.py",
        env={"KILLED_RUN_READY": str(ready)},
    )
    info: dict[str, Any] | None = None
    try:
        info = _wait_ready(run, ready)
        assert info["pytest"] == run.pid
        assert _alive(info["postmaster"]) and Path(info["data_dir"]).is_dir()
        assert all(_alive(pid) for pid in info["coordinators"])

        os.kill(run.pid, sig)  # the pytest process only, as `kill` and `timeout` do
        code = run.wait(timeout=120)

        assert code == exit_code, run.output
        left = _leftovers(info)
        assert not left, f"left behind: {left}\n{run.output}"
    finally:
        run.kill()
        if info is not None:
            _end_leftovers(info)
