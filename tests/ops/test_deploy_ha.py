"""deploy/ for replicas on PostgreSQL: the template unit lane-coordinator@.service keeps the
single server's hardening, sets LimitNOFILE, reads the store from the env file and its
password from a credential, and its command lines run with the real CLI (its `check` passes
on a migrated database and refuses an unmigrated one); the env file example names a
postgresql URL without a password; the nginx and Caddy configs parse (balanced blocks,
statements ended), send to both replicas, fail over POSTs on error, timeout and 503, keep
long polls open, and Caddy checks /readyz actively. (`systemd-analyze verify`, nginx -t and
caddy validate are not part of the suite: they are not on every machine.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

from coordinator.cli import build_parser, resolve_store
from coordinator.config import Config
from tests.harness import cli, write_token_file

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
TEMPLATE = DEPLOY / "lane-coordinator@.service"
SINGLE = DEPLOY / "lane-coordinator.service"
ENV_EXAMPLE = DEPLOY / "replica.env.example"
NGINX = DEPLOY / "nginx-ha.conf"
CADDY = DEPLOY / "Caddyfile.ha"
PORTS = ("8788", "8789")  # the instances every file names
TOKEN = "deploy-ha-test-token-0123456789-abcdefghijklm"
LONG_POLL_MIN_SECONDS = 75
HARDENING = (
    "DynamicUser", "UMask", "NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp",
    "PrivateDevices", "PrivateUsers", "ProtectKernelTunables", "ProtectKernelModules",
    "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock", "ProtectHostname",
    "ProtectProc", "ProcSubset", "RestrictAddressFamilies", "RestrictNamespaces",
    "RestrictRealtime", "RestrictSUIDSGID", "LockPersonality", "RemoveIPC",
    "CapabilityBoundingSet", "AmbientCapabilities", "SystemCallArchitectures",
    "SystemCallFilter", "IPAddressAllow", "IPAddressDeny", "LimitNOFILE", "ExecReload",
    "Restart", "TimeoutStopSec",
)  # fmt: skip


def entries(path: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) of a unit file, repeated keys kept."""
    out, section = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            assert line.endswith("]"), line
            section = line.strip("[]")
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not key=value: {line!r}"
        out.append((section, key.strip(), value.strip()))
    return out


def values(path: Path, key: str) -> list[str]:
    return [v for s, k, v in entries(path) if s == "Service" and k == key]


def value(path: Path, key: str) -> str:
    found = values(path, key)
    assert len(found) == 1, (path.name, key, found)
    return found[0]


# ---------------------------------------------------------------- the template unit


def test_template_unit_keeps_the_hardening_and_sets_limit_nofile() -> None:
    assert {s for s, _, _ in entries(TEMPLATE)} == {"Unit", "Service", "Install"}
    for key in HARDENING:
        assert values(TEMPLATE, key) == values(SINGLE, key), key
    for unit in (TEMPLATE, SINGLE):
        assert int(value(unit, "LimitNOFILE")) >= 65536
    assert value(TEMPLATE, "DynamicUser") == "yes"
    assert value(TEMPLATE, "CapabilityBoundingSet") == ""


def test_template_unit_takes_store_and_secrets_from_outside_the_unit() -> None:
    assert value(TEMPLATE, "EnvironmentFile") == "/etc/lane-coordinator/replica.env"
    assert sorted(values(TEMPLATE, "LoadCredential")) == [
        "pgpass:/etc/lane-coordinator/pgpass",
        "token:/etc/lane-coordinator/token",
    ]
    env = " ".join(values(TEMPLATE, "Environment"))
    assert "PGPASSFILE=%d/pgpass" in env
    assert "TOKEN" not in env and "PGPASSWORD" not in env and "postgresql://" not in env
    for key in ("ExecStartPre", "ExecStart"):
        line = value(TEMPLATE, key)
        args = shlex.split(line)
        assert args[args.index("--port") + 1] == "%i"  # the instance is the port
        assert args[args.index("--host") + 1] == "127.0.0.1"
        assert "--data-dir" not in args and "--store" not in args  # the store: env file
        assert args[args.index("--token-file") + 1] == "${CREDENTIALS_DIRECTORY}/token"


def _instance_args(key: str, port: str, creds: Path) -> list[str]:
    line = value(TEMPLATE, key).replace("%i", port)
    line = line.replace("${CREDENTIALS_DIRECTORY}", str(creds))
    line = line.replace("/etc/lane-coordinator/config.toml", str(DEPLOY / "production-config.toml"))
    return shlex.split(line)[1:]


def test_template_command_lines_run_with_the_real_cli(pg_dsn: str, tmp_path: Path) -> None:
    """The instance's `check` (ExecStartPre) with the store in LANE_COORDINATOR_STORE, as the
    env file gives it: refused before `migrate`, accepted after; `serve` parses the same."""
    creds = tmp_path / "credentials"
    creds.mkdir()
    write_token_file(creds / "token", TOKEN)
    env = {"LANE_COORDINATOR_STORE": pg_dsn}
    pre = _instance_args("ExecStartPre", PORTS[0], creds)
    assert pre[0] == "check"
    refused = cli(*pre, env=env)
    assert refused.returncode != 0
    assert "lane-coordinator migrate" in refused.stderr
    assert cli("migrate", env=env).returncode == 0
    done = cli(*pre, env=env)
    assert done.returncode == 0, done.stderr
    assert f"would listen on 127.0.0.1:{PORTS[0]}" in done.stdout
    serve = _instance_args("ExecStart", PORTS[0], creds)
    assert serve[0] == "serve" and serve[1:] == pre[1:]  # the dry run checks what serve runs
    args = build_parser().parse_args(serve)
    assert args.port == int(PORTS[0]) and args.data_dir is None


# ---------------------------------------------------------------- the env file


def test_env_example_names_a_postgresql_store_without_a_password() -> None:
    settings = {}
    for raw in ENV_EXAMPLE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, val = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", key), line
        settings[key] = val
    assert set(settings) == {"LANE_COORDINATOR_STORE"}  # PGPASSWORD only as a comment
    url = settings["LANE_COORDINATOR_STORE"]
    assert resolve_store(None, Config(routes={}, lanes={}), {"LANE_COORDINATOR_STORE": url}) == url
    parts = urlsplit(url)
    assert parts.scheme == "postgresql" and parts.username and parts.password is None


# ---------------------------------------------------------------- the proxies


def _seconds(text: str) -> int:
    m = re.fullmatch(r"(\d+)(s|m)?", text)
    assert m is not None, text
    return int(m.group(1)) * (60 if m.group(2) == "m" else 1)


def _code(path: Path) -> list[str]:
    """The non-comment, non-empty lines, stripped."""
    lines = [ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines()]
    return [ln for ln in lines if ln]


def _balanced(lines: list[str]) -> None:
    depth = 0
    for ln in lines:
        depth += ln.count("{") - ln.count("}")
        assert depth >= 0, ln
    assert depth == 0


def test_nginx_ha_parses_fails_over_and_keeps_long_polls() -> None:
    lines = _code(NGINX)
    _balanced(lines)
    for ln in lines:  # every statement ends with ; or opens/closes a block
        assert ln.endswith((";", "{", "}")), ln
    text = "\n".join(lines)
    upstream = re.search(r"upstream (\w+) \{(.*?)\}", text, re.S)
    assert upstream is not None
    servers = re.findall(r"server 127\.0\.0\.1:(\d+)\b", upstream.group(2))
    assert tuple(servers) == PORTS
    assert f"proxy_pass http://{upstream.group(1)};" in text
    m = re.search(r"proxy_next_upstream ([^;]+);", text)
    assert m is not None
    assert {"error", "timeout", "http_503", "non_idempotent"} <= set(m.group(1).split())
    for key in ("proxy_read_timeout", "proxy_send_timeout"):
        t = re.search(rf"{key} (\S+);", text)
        assert t is not None, key
        assert _seconds(t.group(1)) >= LONG_POLL_MIN_SECONDS
    assert "proxy_buffering off;" in text
    assert "/readyz" in NGINX.read_text()  # the note on active checks


def test_caddy_ha_checks_readyz_and_retries_posts() -> None:
    lines = _code(CADDY)
    _balanced(lines)
    text = "\n".join(lines)
    proxy = re.search(r"^reverse_proxy (.+) \{$", text, re.M)
    assert proxy is not None
    assert proxy.group(1).split() == [f"127.0.0.1:{p}" for p in PORTS]
    assert re.search(r"^health_uri /readyz$", text, re.M)
    interval = re.search(r"^health_interval (\S+)$", text, re.M)
    assert interval is not None and _seconds(interval.group(1)) <= 2
    retry = re.search(r"lb_retry_match \{\n(.*?)\n\}", text, re.S)
    assert retry is not None and "POST" in retry.group(1).split()
    for key in ("read_timeout", "write_timeout", "response_header_timeout"):
        t = re.search(rf"^{key} (\S+)$", text, re.M)
        assert t is not None, key
        assert _seconds(t.group(1)) >= LONG_POLL_MIN_SECONDS
    assert "flush_interval -1" in text
