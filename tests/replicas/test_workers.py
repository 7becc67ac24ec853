"""`serve --workers N` (coordinator/workers.py): N replica processes on one port of the
PostgreSQL store, each a whole replica; SIGTERM stops them all, a worker that dies ends the
set, and the SQLite store refuses it."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.harness.config import make_config, write_config, write_token_file
from tests.harness.subproc import CoordinatorProcess, cli

BODY = {"machineId": "m1", "project": "p", "scene": "s", "promptHash": "sha256:" + "2" * 64}


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                out.append(int(entry.name))
    return out


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.fixture
def workers(tmp_path: Path, pg_dsn: str) -> CoordinatorProcess:
    assert cli("migrate", "--store", pg_dsn).returncode == 0
    config = write_config(tmp_path / "config.toml", make_config())
    return CoordinatorProcess(
        tmp_path / "w", config=config, store=pg_dsn, extra_args=("--workers", "2")
    )


def _is_started(line: str) -> bool:
    return '"coordinator.started"' in line


def test_two_workers_serve_one_port_and_sigterm_stops_both(workers: CoordinatorProcess) -> None:
    try:
        kids = _children(workers.pid)
        assert len(kids) == 2
        first = workers.wait_for_line(_is_started)
        workers.wait_for_line(_is_started, 60, start=workers.lines.index(first) + 1)
        started = workers.events("coordinator.started")
        assert [s["address"] for s in started] == [f"127.0.0.1:{workers.port}"] * 2
        # a new connection each time, whichever worker takes it: one lane, one ticket
        tickets = {
            workers.op("acquire", {**BODY, "lane": "solo:workers"})["ticket"]["ticketId"]
            for _ in range(8)
        }
        assert len(tickets) == 1
    finally:
        code = workers.stop()
    assert code == 0
    assert all(_gone(k) for k in kids)


def test_a_worker_that_dies_ends_the_set(workers: CoordinatorProcess) -> None:
    kids = _children(workers.pid)
    os.kill(kids[0], signal.SIGKILL)
    assert workers.wait(timeout=60) == 1
    assert all(_gone(k) for k in kids)


def test_the_sqlite_store_refuses_workers(tmp_path: Path) -> None:
    token = tmp_path / "token"
    write_token_file(token, None)
    run = cli(
        "serve", "--port", "0", "--data-dir", str(tmp_path / "d"), "--token-file", str(token),
        "--workers", "2",
    )  # fmt: skip
    assert run.returncode == 2
    assert "--workers needs the PostgreSQL store" in run.stderr
