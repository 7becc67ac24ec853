"""`lane-coordinator` as a newcomer first runs it (issue 20's list): a data dir the server
cannot write, PostgreSQL connection failures, a corrupt lane file and a backup under `check`,
the help of every command, numbers and plurals in messages, and `/control-room/`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.harness import CoordinatorProcess, cli, write_config
from tests.harness.config import COORDINATOR_BIN

TOKEN = "first-run-token-0123456789-abcdefghijklmnopq"


# Root passes every mode check through these capabilities; without them a mode refuses root
# as it refuses its owner (the checkout and its interpreter stay readable: root owns them).
MODE_BYPASS = "-dac_override,-dac_read_search,-fowner"


def as_unprivileged(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`lane-coordinator ARGS` as a process that file modes apply to: this one, or (as root)
    root without the capabilities that bypass them (util-linux `setpriv`)."""
    cmd = [str(COORDINATOR_BIN), *args]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.fail("as root, this test needs util-linux's setpriv to drop CAP_DAC_OVERRIDE")
        cmd = [setpriv, f"--inh-caps={MODE_BYPASS}", f"--bounding-set={MODE_BYPASS}", *cmd]
    env = {**os.environ, "LANE_COORDINATOR_TOKEN": TOKEN}
    return subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


# ---------------------------------------------------------------- 1. a data dir it cannot write


@pytest.mark.parametrize("command", ["check", "serve"])
def test_a_data_dir_the_server_cannot_write_is_named_with_the_reason(
    tmp_path: Path, command: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o555)  # readable, not writable (by anyone but root)
    run = as_unprivileged(command, "--data-dir", str(data), "--port", "0")
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    last = run.stderr.strip().splitlines()[-1]
    assert str(data) in last and "not writable" in last and "Permission denied" in last, last
    assert "ok: config valid" not in run.stdout


def test_check_names_the_missing_parent_it_cannot_create(tmp_path: Path) -> None:
    parent = tmp_path / "locked"
    parent.mkdir(mode=0o555)
    parent.chmod(0o555)
    run = as_unprivileged("check", "--data-dir", str(parent / "data"))
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert str(parent / "data") in run.stderr and "cannot be created" in run.stderr, run.stderr
    assert not (parent / "data").exists()  # a dry run creates nothing


def test_an_os_error_names_its_path(tmp_path: Path) -> None:
    """Whatever OSError ends a command, the message names the file it was about: here a
    backup destination under a folder the server cannot write."""
    data, locked = tmp_path / "data", tmp_path / "locked"
    data.mkdir()
    locked.mkdir()
    locked.chmod(0o555)
    run = as_unprivileged("backup", str(locked / "dest"), "--data-dir", str(data))
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert "Permission denied" in run.stderr and str(locked / "dest") in run.stderr, run.stderr


# ---------------------------------------------------------------- 2. PostgreSQL says why

SECRET = "pw-first-run-never-printed"


def _variant(dsn: str, kind: str, refused_port: int) -> str:
    """The test cluster's DSN (trust auth: any password is accepted), with a password, made
    wrong in one way a newcomer meets."""
    url = dsn.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@", 1)
    if kind == "missing-database":
        return url.rsplit("/", 1)[0] + "/no_such_database"
    if kind == "unknown-role":
        return url.replace("postgresql://postgres:", "postgresql://ghost:", 1)
    host_port = url.split("@", 1)[1].split("/", 1)[0]
    return url.replace(host_port, f"127.0.0.1:{refused_port}", 1)


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("missing-database", 'database "no_such_database" does not exist'),
        ("unknown-role", 'role "ghost" does not exist'),
        ("server-down", "Connection refused"),
    ],
)
def test_a_postgres_connection_failure_says_libpqs_reason_without_the_password(
    pg_dsn: str, refused_port: int, kind: str, reason: str
) -> None:
    url = _variant(pg_dsn, kind, refused_port)
    for args in (("check", "--data-dir", "unused"), ("migrate",)):
        run = cli(*args, "--store", url, env={"LANE_COORDINATOR_TOKEN": TOKEN})
        assert run.returncode == 1, (args, run.stdout, run.stderr)
        assert reason in run.stderr, (args, run.stderr)
        assert SECRET not in run.stdout + run.stderr


def test_a_lost_database_is_logged_with_its_reason(
    pg_dsn: str, postgres: Any, tmp_path: Path
) -> None:
    """`lane.commit_failed` (a lane call while the database is down) carries libpq's reason,
    not only the class name `StoreError`."""
    url = pg_dsn.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@", 1)
    assert cli("migrate", "--store", url).returncode == 0
    config = write_config(tmp_path / "config.toml")
    proc = CoordinatorProcess(tmp_path / "unused", token=TOKEN, config=config, store=url)
    body = {"lane": "solo:main", "machineId": "m", "project": "p", "scene": "s",
            "promptHash": "h"}  # fmt: skip
    try:
        assert proc.op("acquire", body)["granted"] is True
        postgres.stop("immediate")
        try:
            again = {"protocolVersion": 1, **body, "scene": "s2"}
            status, _ = proc.request("POST", "/v1/lanes/acquire", body=again)
            assert status == 503
            failed = proc.wait_for_event("lane.commit_failed")
        finally:
            postgres.start()
    finally:
        proc.stop()
    assert failed["reason"] != "StoreError" and "Connection refused" in failed["reason"], failed
    assert SECRET not in proc.text
