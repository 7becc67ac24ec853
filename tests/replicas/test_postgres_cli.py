"""`lane-coordinator` with a PostgreSQL store, as an operator runs it: `migrate`, `check`,
`serve --store URL` / LANE_COORDINATOR_STORE, a refused unmigrated database, and a password
in the URL that never reaches a log line or a reply."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from coordinator.store.postgres_db import migrations
from tests.harness.config import TOKEN, make_config, write_config, write_token_file
from tests.harness.subproc import CoordinatorProcess, cli

SECRET = "s3cret-pw-never-logged"


def with_password(dsn: str) -> str:
    """The same database, a password in the URL (the test cluster trusts loopback, so any
    password works; what matters is that none is ever printed)."""
    return dsn.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@", 1)


def test_serve_refuses_an_unmigrated_database_and_says_what_to_run(
    tmp_path: Path, pg_dsn: str
) -> None:
    token = tmp_path / "token"
    write_token_file(token, None)
    run = cli("serve", "--port", "0", "--store", with_password(pg_dsn), "--token-file", str(token))
    assert run.returncode == 1, run.stderr
    assert "lane-coordinator migrate" in run.stderr
    assert SECRET not in run.stdout + run.stderr


def test_migrate_then_check_then_serve_from_the_environment(tmp_path: Path, pg_dsn: str) -> None:
    url = with_password(pg_dsn)
    first = cli("migrate", "--store", url)
    assert first.returncode == 0, first.stderr
    assert "0001_initial.sql" in first.stdout and SECRET not in first.stdout
    again = cli("migrate", "--store", url)
    assert again.returncode == 0 and "nothing to apply" in again.stdout
    latest = migrations()[-1][0]
    token = tmp_path / "token"
    write_token_file(token, TOKEN)
    config = write_config(tmp_path / "config.toml", make_config())
    checked = cli("check", "--store", url, "--token-file", str(token), "--config", str(config))
    assert checked.returncode == 0, checked.stderr
    assert f"schema version {latest}" in checked.stdout and SECRET not in checked.stdout
    env = {k: v for k, v in os.environ.items() if k != "LANE_COORDINATOR_TOKEN"}
    env["LANE_COORDINATOR_STORE"] = url
    proc = CoordinatorProcess(tmp_path / "unused", token_file=token, config=config, env=env)
    try:
        reply = proc.op(
            "acquire",
            {
                "lane": "solo:cli",
                "machineId": "m1",
                "project": "p",
                "scene": "s",
                "promptHash": "sha256:" + "0" * 64,
            },
        )
        assert reply["coordinator"] == "actor-postgres"
        assert reply["ticket"]["state"] == "held"
        with urllib.request.urlopen(proc.url + "/readyz", timeout=10) as resp:
            assert json.loads(resp.read())["ready"] is True
        started = proc.wait_for_event("coordinator.started")
        assert started["store"].startswith("host=") or "postgres" in started["store"]
    finally:
        proc.stop()
    assert SECRET not in proc.text
    assert not (tmp_path / "unused").exists() or not any((tmp_path / "unused").iterdir())


@pytest.mark.parametrize("bad", ["mysql://x@y/z", "sqlite:///tmp/x"])
def test_an_unknown_store_is_refused_without_echoing_it(tmp_path: Path, bad: str) -> None:
    token = tmp_path / "token"
    write_token_file(token, None)
    run = cli("serve", "--port", "0", "--store", bad, "--data-dir", str(tmp_path / "d"),
              "--token-file", str(token))  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert "postgresql://" in run.stderr and bad not in run.stderr


def test_import_moves_a_sqlite_data_dir_to_replicas(tmp_path: Path, pg_dsn: str) -> None:
    token = tmp_path / "token"
    write_token_file(token, TOKEN)
    config = write_config(tmp_path / "config.toml", make_config())
    body = {
        "lane": "solo:moved",
        "machineId": "m1",
        "project": "p",
        "scene": "s",
        "promptHash": "sha256:" + "1" * 64,
    }
    single = CoordinatorProcess(tmp_path / "data", token_file=token, config=config)
    try:
        held = single.op("acquire", body)["ticket"]
    finally:
        single.stop()
    assert cli("migrate", "--store", pg_dsn).returncode == 0
    run = cli("import", "--from", str(tmp_path / "data"), "--store", pg_dsn)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "solo:moved: imported" in run.stdout
    replica = CoordinatorProcess(tmp_path / "r1", token_file=token, config=config, store=pg_dsn)
    try:
        again = replica.op("acquire", body)["ticket"]  # the same identity: the same ticket
        assert (again["ticketId"], again["state"], again["fence"]) == (
            held["ticketId"],
            "held",
            held["fence"],
        )
    finally:
        replica.stop()
