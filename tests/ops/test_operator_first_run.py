"""`lane-coordinator` as a newcomer first runs it (issue 20's list): a data dir the server
cannot write, PostgreSQL connection failures, a corrupt lane file and a backup under `check`,
the help of every command, numbers and plurals in messages, and `/control-room/`."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import urllib.request
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


# ---------------------------------------------------------------- 4. check on lane files


def test_check_names_a_corrupt_lane_file_as_the_server_does(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "solo+main.sqlite").write_bytes(b"not a database, just bytes " * 40)
    run = cli("check", "--data-dir", str(data), env={"LANE_COORDINATOR_TOKEN": TOKEN})
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert "solo+main.sqlite: corrupt file (file is not a database)" in run.stderr, run.stderr
    assert "cannot copy" not in run.stderr


def test_check_of_a_backup_leaves_the_backup_as_it_was(tmp_path: Path) -> None:
    """`check --data-dir BACKUP` works on scratch copies: no -wal or -shm appears beside the
    backup's lane files (and nothing else changes)."""
    data, backup = tmp_path / "data", tmp_path / "backup"
    config = write_config(tmp_path / "config.toml")
    proc = CoordinatorProcess(data, token=TOKEN, config=config)
    try:
        proc.op("acquire", {"lane": "solo:main", "machineId": "m", "project": "p",
                            "scene": "s", "promptHash": "h"})  # fmt: skip
        done = cli("backup", str(backup), "--data-dir", str(data))
        assert done.returncode == 0, done.stderr
    finally:
        proc.stop()
    before = {p.name: p.read_bytes() for p in backup.iterdir()}
    assert list(before) == ["solo+main.sqlite"]
    run = cli("check", "--data-dir", str(backup), "--config", str(config),
              env={"LANE_COORDINATOR_TOKEN": TOKEN})  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "migrations apply cleanly to 1 lane file " in run.stdout
    assert {p.name: p.read_bytes() for p in backup.iterdir()} == before


# ---------------------------------------------------------------- 9. help, 12. wording


def _option_helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's (and positional's) rendered help, unwrapped, by its first flag or name."""
    out: dict[str, str] = {}
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = action.option_strings[0] if action.option_strings else action.dest
        out[name] = " ".join(formatter._expand_help(action).split()) if action.help else ""
    return out


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    from coordinator.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("command", ["serve", "check", "backup", "migrate", "import"])
def test_every_option_of_the_server_commands_says_what_it_is_and_its_default(
    command: str,
) -> None:
    parser = _subparsers()[command]
    helps = _option_helps(parser)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = action.option_strings[0] if action.option_strings else action.dest
        assert helps[name], f"lane-coordinator {command} {name}: no help"
        if action.default not in (None, argparse.SUPPRESS, False):
            assert f"(default: {action.default})" in helps[name], (command, name, helps[name])
    assert parser.description, f"lane-coordinator {command}: no description"


def test_serve_help_names_the_defaults_a_newcomer_needs() -> None:
    text = " ".join(_subparsers()["serve"].format_help().split())
    for needle in ("(default: 127.0.0.1)", "(default: 8787)", "(default: info)",
                   "LANE_COORDINATOR_TOKEN"):  # fmt: skip
        assert needle in text, needle


def test_a_range_is_printed_with_its_numbers_as_written(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("history_retained = 0\n")
    run = cli("check", "--data-dir", str(tmp_path / "d"), "--config", str(bad),
              env={"LANE_COORDINATOR_TOKEN": TOKEN})  # fmt: skip
    assert run.returncode == 2
    assert "history_retained must be between 1 and 1000000, got 0" in run.stderr, run.stderr
    assert "e+" not in run.stderr


def test_check_counts_one_route_in_the_singular(tmp_path: Path) -> None:
    one = tmp_path / "one.toml"
    one.write_text('[routes."solo"]\ncapacity = 1\n[lanes."solo:a"]\ncapacity = 1\n')
    run = cli("check", "--data-dir", str(tmp_path / "d"), "--config", str(one),
              env={"LANE_COORDINATOR_TOKEN": TOKEN})  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "(1 route, 1 lane override), 1 token accepted" in run.stdout, run.stdout


def test_the_control_room_with_a_trailing_slash_is_the_control_room(tmp_path: Path) -> None:
    proc = CoordinatorProcess(tmp_path / "data", token=TOKEN)
    try:
        with urllib.request.urlopen(proc.url + "/control-room/", timeout=30) as resp:
            assert resp.status == 200
            assert resp.headers.get_content_type() == "text/html"
            assert b"control-room.js" in resp.read()
    finally:
        proc.stop()
