"""The real `lane-coordinator` process (and scripts/dev-run.sh) on a new user's rough
edges: a busy port, a waiter timeout shorter than the longest await, and the modes of
every file and directory it creates, whatever the umask it was started with."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.credentials import Credentials, parse_credentials
from coordinator.store.files import copy_lane_file
from coordinator.store.lock import LOCK_NAME
from tests.harness import CoordinatorProcess, StartServer, cli, write_config, write_token_file

TOKEN = "hardening-token-0123456789-abcdefghijklmnopqrst"
SOLO = "solo:main"  # write_config's capacity-1 lane
ACQUIRE = {"lane": SOLO, "machineId": "mA", "claimId": "cA", "project": "p", "scene": "s",
           "promptHash": "h"}  # fmt: skip
REPO = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    """The umask a child process inherits (restored at once: it is process-wide)."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    write_token_file(path, TOKEN)
    return path


def human_lines(stderr: str) -> list[str]:
    """stderr without the structured (JSON) log lines."""
    return [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("{")]


def events(stderr: str) -> list[str]:
    return [json.loads(ln)["event"] for ln in stderr.splitlines() if ln.startswith("{")]


# ---------------------------------------------------------------- a busy port


def test_serve_on_a_busy_port_names_the_address_and_never_logs_started(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        done = cli(
            "serve", "--host", "127.0.0.1", "--port", str(port),
            "--data-dir", str(tmp_path / "data"), "--token-file", str(token_file(tmp_path)),
            "--config", str(write_config(tmp_path / "c.toml")),
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "coordinator.started" not in events(done.stderr), done.stderr
    assert "Traceback" not in done.stderr and "listening on" not in done.stderr
    [line] = human_lines(done.stderr)
    assert line.startswith(f"lane-coordinator: cannot listen on 127.0.0.1:{port}: "), line
    assert "address already in use" in line and "--port" in line, line
    assert "(" + "'127.0.0.1'" not in line  # not asyncio's Python tuple


def test_started_is_logged_once_listening_with_the_address(tmp_path: Path) -> None:
    srv = CoordinatorProcess(
        tmp_path / "data", token_file(tmp_path), write_config(tmp_path / "c.toml")
    )
    try:
        [started] = srv.events("coordinator.started")
        assert started["address"] == srv.url.removeprefix("http://")
        assert started["address"].split(":")[1] != "0"  # the real port for --port 0
    finally:
        srv.stop()


# ---------------------------------------------------------------- waiter timeout


@pytest.mark.parametrize("command", ["check", "serve"])
def test_a_waiter_timeout_under_the_longest_await_is_refused(tmp_path: Path, command: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text("waiter_timeout_seconds = 30\n[routes.solo]\ncapacity = 1\n", "utf-8")
    done = cli(
        command, "--host", "127.0.0.1", "--port", "0", "--data-dir", str(tmp_path / "data"),
        "--config", str(config), "--token-file", str(token_file(tmp_path)),
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "listening on" not in done.stderr and "Traceback" not in done.stderr
    [line] = human_lines(done.stderr)
    assert "waiter_timeout_seconds must be at least 90" in line, line
    assert "await" in line and "got 30" in line, line
    assert not (tmp_path / "data").exists()  # refused before anything was created


def test_check_accepts_the_floor(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("waiter_timeout_seconds = 90\n[routes.solo]\ncapacity = 1\n", "utf-8")
    done = cli(
        "check", "--data-dir", str(tmp_path / "data"), "--config", str(config),
        "--token-file", str(token_file(tmp_path)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: ")


# ---------------------------------------------------------------- private files


def lane_files(data: Path) -> list[Path]:
    lane = data / "solo+main.sqlite"
    return [lane, lane.with_name(lane.name + "-wal"), lane.with_name(lane.name + "-shm")]


@pytest.mark.parametrize("mask", [0o022, 0o000])
def test_served_and_backed_up_files_are_private_whatever_the_umask(
    tmp_path: Path, mask: int
) -> None:
    data = tmp_path / "data"  # created by the server
    tok = token_file(tmp_path)
    with umask(mask):
        srv = CoordinatorProcess(data, tok, write_config(tmp_path / "c.toml"))
    try:
        srv.op("acquire", ACQUIRE, TOKEN)
        assert mode(data) == 0o700
        assert mode(data / LOCK_NAME) == 0o600
        for path in lane_files(data):  # -wal and -shm exist while the server has it open
            assert mode(path) == 0o600, (path.name, oct(mode(path)))
        dest = tmp_path / "backups" / "today"
        with umask(mask):
            done = cli("backup", str(dest), "--data-dir", str(data))
        assert done.returncode == 0, done.stderr
        assert mode(dest) == 0o700 and mode(dest.parent) == 0o700
        copies = sorted(dest.iterdir())
        assert [p.name for p in copies] == ["solo+main.sqlite"]
        assert all(mode(p) == 0o600 for p in copies)
    finally:
        srv.stop()
    checked = cli(
        "check", "--data-dir", str(data), "--config", str(tmp_path / "c.toml"),
        "--token-file", str(tok),
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr


async def test_the_store_makes_private_files_even_under_umask_zero(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Without the CLI's umask (an embedding, a test server): the store's own modes."""
    data = tmp_path / "fresh" / "data"
    with umask(0o000):
        srv = await start_server(data_dir=data)
        await srv.ok("acquire", ACQUIRE)
        await srv.ok("status", {"lane": SOLO})
        copy_lane_file(srv.lane_file(SOLO), tmp_path / "copy.sqlite")
    assert mode(data) == 0o700
    for path in lane_files(data):
        assert mode(path) == 0o600, (path.name, oct(mode(path)))
    assert mode(tmp_path / "copy.sqlite") == 0o600


def test_a_lane_file_left_open_by_an_older_version_is_tightened(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    tok = token_file(tmp_path)
    srv = CoordinatorProcess(data, tok, write_config(tmp_path / "c.toml"))
    try:
        srv.op("acquire", ACQUIRE, TOKEN)
    finally:
        srv.stop()
    lane = data / "solo+main.sqlite"
    lane.chmod(0o644)
    srv = CoordinatorProcess(data, tok, write_config(tmp_path / "c.toml"))  # re-arms the lane
    try:
        srv.op("status", {"lane": SOLO}, TOKEN)
        for path in lane_files(data):
            assert mode(path) == 0o600, (path.name, oct(mode(path)))
    finally:
        srv.stop()


# ---------------------------------------------------------------- scripts/dev-run.sh


@pytest.mark.parametrize("mask", [0o022, 0o000])
@pytest.mark.parametrize("old_token", [False, True])
def test_dev_run_keeps_var_and_its_token_private(
    tmp_path: Path, mask: int, old_token: bool
) -> None:
    fake = tmp_path / "bin"  # `python` makes the token; `lane-coordinator` just exits
    fake.mkdir()
    (fake / "python").symlink_to(sys.executable)
    (fake / "lane-coordinator").write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    (fake / "lane-coordinator").chmod(0o755)
    work = tmp_path / "repo"
    work.mkdir()
    if old_token:  # left by an older script, under a permissive umask
        (work / "var").mkdir(mode=0o755)
        (work / "var" / "dev-token").write_text("x" * 43 + "\n", encoding="utf-8")
        (work / "var" / "dev-token").chmod(0o644)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOST": "127.0.0.1", "PORT": "8787", "DATA_DIR": "var/data",
        "CONFIG": str(REPO / "deploy" / "example-config.toml"), "BIN": str(fake),
    }  # fmt: skip
    done = subprocess.run(
        ["sh", str(REPO / "scripts" / "dev-run.sh")],
        cwd=work, env=env, umask=mask, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert mode(work / "var") == 0o700
    assert mode(work / "var" / "data") == 0o700
    assert mode(work / "var" / "dev-token") == 0o600
    assert len((work / "var" / "dev-token").read_text().strip()) >= 32
    # the server's token file: only the hashes of an admin and a reader credential
    creds = work / "var" / "dev-credentials"
    assert mode(creds) == mode(work / "var" / "dev-read-token") == 0o600
    parsed = parse_credentials(creds.read_text(), source=str(creds))
    assert [(c.name, c.role.value, c.plain) for c in parsed] == [
        ("dev", "admin", False),
        ("dev-control-room", "reader", False),
    ]
    for name, cred in (("dev-token", parsed[0]), ("dev-read-token", parsed[1])):
        token = (work / "var" / name).read_text().strip()
        assert token not in creds.read_text() and token in done.stdout
        assert Credentials(parsed).authenticate(token.encode()) == cred
