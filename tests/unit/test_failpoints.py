"""coordinator/failpoints.py: the grammar, conditions, counts, the actions, and that nothing is
armed without the environment variable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coordinator import failpoints
from coordinator.failpoints import ENV, Failpoints, parse


def test_nothing_is_armed_without_the_variable() -> None:
    assert os.environ.get(ENV) is None
    assert failpoints.ENABLED is False
    assert failpoints.hit("pg.lane_locked", lane="solo:x") is None


def test_the_grammar() -> None:
    points = parse("pg.lane_locked=2*stop@lane=solo:frozen ; other=sleep(0.5)@file=/tmp/x")
    p = points["pg.lane_locked"]
    assert (p.action, p.remaining, p.when) == ("stop", 2, {"lane": "solo:frozen"})
    q = points["other"]
    assert (q.action, q.arg, q.remaining, q.when) == ("sleep", 0.5, None, {"file": "/tmp/x"})
    assert parse("") == {} and parse(" ; ") == {}


@pytest.mark.parametrize(
    "spec",
    [
        "pg.lane_locked",  # no action
        "pg.lane_locked=explode",  # unknown action
        "pg.lane_locked=sleep",  # sleep without seconds
        "pg.lane_locked=sleep(soon)",
        "pg.lane_locked=stop(3)",  # stop takes no argument
        "pg.lane_locked=stop@colour=red",  # unknown condition
        "pg.lane_locked=stop@lane=",
        "Bad Name=stop",
    ],
)
def test_a_malformed_spec_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match=ENV):
        parse(spec)


def test_conditions_and_counts() -> None:
    fp = Failpoints("p=2*sleep(0)@lane=a")
    assert fp.hit("p", lane="b") is None  # another lane: not counted
    assert fp.hit("unknown", lane="a") is None
    assert fp.hit("p", lane="a") == "sleep"
    assert fp.hit("p", lane="a") == "sleep"
    assert fp.hit("p", lane="a") is None  # spent
    assert Failpoints("p=off").hit("p") is None


def test_a_file_condition_arms_the_point_once_the_file_exists(tmp_path: Path) -> None:
    marker = tmp_path / "arm"
    fp = Failpoints(f"p=1*sleep(0)@file={marker}")
    assert fp.hit("p") is None
    marker.touch()
    assert fp.hit("p") == "sleep"
    assert fp.hit("p") is None


def test_sleep_sleeps() -> None:
    fp = Failpoints("p=sleep(0.2)")
    started = time.monotonic()
    assert fp.hit("p") == "sleep"
    assert time.monotonic() - started >= 0.19


def _state(pid: int) -> str:
    """The process state letter of /proc/<pid>/stat (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_stop_freezes_the_whole_process_until_sigcont(tmp_path: Path) -> None:
    """Armed by the variable in a child process: `stop` stops it (every thread), SIGCONT
    lets it go on past the point."""
    code = (
        "from coordinator import failpoints\n"
        "assert failpoints.ENABLED\n"
        "failpoints.hit('pg.lane_locked', lane='solo:a')\n"
        "print('resumed', flush=True)\n"
    )
    env = {**os.environ, ENV: "pg.lane_locked=1*stop@lane=solo:a"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while _state(proc.pid) != "T":
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the child never stopped"
            time.sleep(0.02)
        time.sleep(0.2)
        assert proc.poll() is None and _state(proc.pid) == "T"
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    lines = out.decode().splitlines()
    assert "failpoint.hit" in lines[0] and lines[-1] == "resumed"  # logged before it stops


def test_a_malformed_variable_refuses_to_import() -> None:
    env = {**os.environ, ENV: "pg.lane_locked=explode"}
    done = subprocess.run(
        [sys.executable, "-c", "import coordinator.failpoints"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert ENV in done.stderr and "explode" in done.stderr
