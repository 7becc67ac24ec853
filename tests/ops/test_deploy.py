"""deploy/: the shipped config passes `lane-coordinator check`; the systemd unit is hardened
and its command lines are accepted by the real CLI; the Containerfile's HEALTHCHECK works
against a real server; the TLS proxies keep long polls open and point at the loopback port.
(`systemd-analyze verify` is not part of the suite: it is not on every machine.)"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from coordinator.cli import build_parser
from tests.harness import CoordinatorProcess, cli, write_token_file

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PRODUCTION = DEPLOY / "production-config.toml"
TOKEN = "deploy-test-token-0123456789-abcdefghijklmn"
LONG_POLL_MIN_SECONDS = 75


def unit_entries() -> list[tuple[str, str, str]]:
    """(section, key, value) of deploy/lane-coordinator.service, repeated keys kept."""
    out, section = [], ""
    for raw in (DEPLOY / "lane-coordinator.service").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def unit_value(key: str) -> str:
    values = [v for s, k, v in unit_entries() if s == "Service" and k == key]
    assert len(values) == 1, (key, values)
    return values[0]


def test_production_config_passes_check(tmp_path: Path) -> None:
    done = cli("check", "--data-dir", str(tmp_path / "data"), "--config", str(PRODUCTION),
               env={"LANE_COORDINATOR_TOKEN": TOKEN})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: config valid")
    for enforced in ("seedance-direct", "drill", "seedance-direct:main-unlimited"):
        assert enforced in done.stdout


def test_check_refuses_a_broken_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(PRODUCTION.read_text() + "\nunknown_key = 1\n")
    done = cli("check", "--data-dir", str(tmp_path / "data"), "--config", str(bad),
               env={"LANE_COORDINATOR_TOKEN": TOKEN})  # fmt: skip
    assert done.returncode != 0
    assert "unknown_key" in done.stderr


def test_systemd_unit_is_hardened() -> None:
    expected = {
        "DynamicUser": "yes",
        "StateDirectory": "lane-coordinator",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "RestrictSUIDSGID": "yes",
        "CapabilityBoundingSet": "",
    }
    for key, value in expected.items():
        assert unit_value(key) == value, key
    assert unit_value("LoadCredential") == "token:/etc/lane-coordinator/token"
    assert "kill -HUP $MAINPID" in unit_value("ExecReload")
    start = shlex.split(unit_value("ExecStart"))
    assert start[1] == "serve"
    assert start[start.index("--host") + 1] == "127.0.0.1"
    assert start[start.index("--token-file") + 1] == "${CREDENTIALS_DIRECTORY}/token"
    assert start[start.index("--data-dir") + 1] == "${STATE_DIRECTORY}"
    assert not any("TOKEN" in v for s, k, v in unit_entries() if k == "Environment")


def _unit_args(key: str, tmp_path: Path) -> list[str]:
    """The unit's command line with systemd's variables and /etc paths pointed at tmp."""
    creds = tmp_path / "credentials"
    creds.mkdir(exist_ok=True)
    write_token_file(creds / "token", TOKEN)
    line = unit_value(key)
    line = line.replace("${CREDENTIALS_DIRECTORY}", str(creds))
    line = line.replace("${STATE_DIRECTORY}", str(tmp_path / "state"))
    line = line.replace("/etc/lane-coordinator/config.toml", str(PRODUCTION))
    return shlex.split(line)[1:]


def test_unit_command_lines_run_with_the_real_cli(tmp_path: Path) -> None:
    pre = _unit_args("ExecStartPre", tmp_path)
    assert pre[0] == "check"
    done = cli(*pre)
    assert done.returncode == 0, done.stderr
    assert "would listen on 127.0.0.1:8787" in done.stdout
    serve = _unit_args("ExecStart", tmp_path)
    assert serve[1:] == pre[1:]  # the dry run checks exactly what serve will run
    build_parser().parse_args(serve)


def containerfile() -> str:
    return (DEPLOY / "Containerfile").read_text()


def _instruction(name: str) -> str:
    """The instruction's arguments, continuation lines joined."""
    text = containerfile().replace("\\\n", " ")
    found = [ln.split(None, 1)[1] for ln in text.splitlines() if ln.startswith(name + " ")]
    assert len(found) == 1, (name, found)
    return found[0]


def test_containerfile_runs_as_non_root_with_a_data_volume() -> None:
    assert _instruction("FROM") == "python:3.11-slim"
    user = _instruction("USER").split(":")[0]
    assert user not in ("root", "0")
    assert json.loads(_instruction("VOLUME")) == ["/data"]
    cmd = json.loads(_instruction("CMD"))
    args = build_parser().parse_args(cmd)
    assert str(args.data_dir) == "/data"
    assert str(args.token_file).startswith("/run/secrets/")
    copies = [ln.split()[1:] for ln in containerfile().splitlines() if ln.startswith("COPY ")]
    assert ["deploy/production-config.toml", str(args.config)] in copies
    assert "LANE_COORDINATOR_TOKEN" not in containerfile()


def test_container_healthcheck_probes_healthz(tmp_path: Path) -> None:
    health = _instruction("HEALTHCHECK")
    probe = json.loads(health[health.index("CMD") + 3 :].strip())
    assert probe[:2] == ["python", "-c"]
    assert "urllib" in probe[2] and "/healthz" in probe[2]
    token_file = tmp_path / "token"
    write_token_file(token_file, TOKEN)
    srv = CoordinatorProcess(tmp_path / "data", token_file)
    code = probe[2].replace("http://127.0.0.1:8787", srv.url)
    try:
        ok = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
        assert ok.returncode == 0, ok.stderr
    finally:
        assert srv.stop() == 0
    down = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert down.returncode != 0  # the server is gone: unhealthy


def _seconds(value: str) -> int:
    m = re.fullmatch(r"(\d+)(s|m)?", value)
    assert m is not None, value
    return int(m.group(1)) * (60 if m.group(2) == "m" else 1)


def test_caddy_proxies_to_loopback_and_keeps_long_polls() -> None:
    text = (DEPLOY / "Caddyfile").read_text()
    assert re.search(r"reverse_proxy 127\.0\.0\.1:8787\b", text)
    timeouts = dict(re.findall(r"^\s*(read_timeout|write_timeout)\s+(\S+)", text, re.M))
    assert set(timeouts) == {"read_timeout", "write_timeout"}
    for value in timeouts.values():
        assert _seconds(value) >= LONG_POLL_MIN_SECONDS


def test_nginx_proxies_to_loopback_and_keeps_long_polls() -> None:
    text = (DEPLOY / "nginx.conf").read_text()
    assert re.search(r"server 127\.0\.0\.1:8787;", text)
    assert "proxy_pass http://lane_coordinator;" in text
    assert re.search(r"listen 443 ssl;", text)
    for key in ("proxy_read_timeout", "proxy_send_timeout"):
        m = re.search(rf"^\s*{key}\s+(\S+);", text, re.M)
        assert m is not None, key
        assert _seconds(m.group(1)) >= LONG_POLL_MIN_SECONDS
    assert "proxy_buffering off;" in text
