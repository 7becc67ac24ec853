"""`make run-ha` and its failover proxy, against REAL replicas on one PostgreSQL database.

scripts/ha_proxy.py runs as a subprocess (as `make run-ha` runs it) in front of two
`lane-coordinator serve --store URL` subprocesses sharing a token file and a fresh database
(`pg_dsn`): calls through the proxy work and reach the shared lanes (a long poll parked
through the proxy is answered when a release, sent through the proxy too, promotes it); a
kill -9 of one replica leaves every call working, the request that meets the dead replica
first is retried on the other, and the proxy's view (`GET /_ha/replicas`) marks it unready
within about 2 s. Last, scripts/run_ha.py (what `make run-ha` runs) as a whole: its own
PostgreSQL, migrate, two replicas and the proxy, the printed ports and token, one call, and
a clean stop on Ctrl-C (SIGINT) that leaves no process behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import CoordinatorProcess, LineProcess, cli, make_config
from tests.harness.config import REPO, write_token_file
from tests.harness.postgres import _temp_parent

PROXY = REPO / "scripts" / "ha_proxy.py"
RUN_HA = REPO / "scripts" / "run_ha.py"
LANE = "solo:main"  # capacity 1 in make_config()
MARKED_UNREADY_WITHIN = 2.5  # seconds: checks every 1 s, each given 1 s


# ---------------------------------------------------------------- HTTP through the proxy


def http(
    url: str, path: str, token: str | None, body: dict[str, Any] | None = None, timeout: float = 30
) -> tuple[int, Any]:
    """One call; (status, decoded JSON). GET without a body, POST with one."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="GET" if body is None else "POST")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def op(url: str, token: str, name: str, body: dict[str, Any], timeout: float = 30) -> Any:
    status, reply = http(url, f"/v1/lanes/{name}", token, {"protocolVersion": 1, **body}, timeout)
    assert status in (200, 201), (name, status, reply)
    return reply


def acquire(url: str, token: str, machine: str, scene: str) -> Any:
    body = {
        "lane": LANE,
        "machineId": machine,
        "claimId": f"c-{machine}",
        "project": "p",
        "scene": scene,
        "promptHash": "h",
    }
    return op(url, token, "acquire", body)


def readiness(proxy_url: str) -> dict[str, bool]:
    status, view = http(proxy_url, "/_ha/replicas", None)
    assert status == 200
    return {r["url"]: r["ready"] for r in view["replicas"]}


# ---------------------------------------------------------------- fixtures


class Ha:
    """Two replicas on one database and the proxy in front of them."""

    def __init__(self, replicas: list[CoordinatorProcess], proxy: LineProcess, url: str) -> None:
        self.replicas = replicas
        self.proxy = proxy
        self.url = url
        self.token = replicas[0].token


def start_proxy(replica_urls: list[str], check_interval: float) -> tuple[LineProcess, str]:
    args = [
        sys.executable,
        str(PROXY),
        "--listen",
        "127.0.0.1:0",
        "--check-interval",
        str(check_interval),
    ]
    for u in replica_urls:
        args += ["--replica", u]
    proc = LineProcess(args, dict(os.environ))
    try:
        line = proc.wait_for_line(lambda ln: ln.startswith("ha-proxy listening on "), 30)
    except BaseException:
        proc.kill()
        raise
    return proc, line.split(" on ", 1)[1].strip()


@pytest.fixture
def make_ha(pg_dsn: str, tmp_path: Path) -> Iterator[Any]:
    """`make_ha(check_interval=1.0)`: migrate the fresh database, start two replicas with one
    token file and one config, then the proxy. Everything is stopped at teardown."""
    started: list[LineProcess] = []

    def make(check_interval: float = 1.0) -> Ha:
        done = cli("migrate", "--store", pg_dsn)
        assert done.returncode == 0, done.stderr
        token_file = tmp_path / "token"
        write_token_file(token_file)
        config = make_config()
        replicas = []
        for name in ("r1", "r2"):
            r = CoordinatorProcess(tmp_path / name, token_file, config, store=pg_dsn)
            started.append(r)
            replicas.append(r)
        proxy, url = start_proxy([r.url for r in replicas], check_interval)
        started.append(proxy)
        return Ha(replicas, proxy, url)

    yield make
    for proc in reversed(started):
        if isinstance(proc, CoordinatorProcess):
            proc.stop()
        else:
            if proc.proc.poll() is None:
                proc.signal(signal.SIGTERM)
            proc.wait(30)


# ---------------------------------------------------------------- the proxy


def test_calls_through_the_proxy_reach_the_shared_lanes(make_ha: Any) -> None:
    ha: Ha = make_ha()
    assert set(readiness(ha.url).values()) == {True}
    status, reply = http(ha.url, "/v1/lanes/status", None, {"protocolVersion": 1, "lane": LANE})
    assert status == 401, reply  # no token: the replica refuses, through the proxy
    assert reply["error"]["code"] == "unauthorized"
    first = acquire(ha.url, ha.token, "mA", "1")
    assert first["coordinator"] == "actor-postgres"
    assert first["granted"] is True
    second = acquire(ha.url, ha.token, "mB", "2")
    assert second["granted"] is False  # capacity 1, whichever replica answered
    again = acquire(ha.url, ha.token, "mA", "1")
    assert again["duplicate"] is True  # the same identity: the same ticket, on either replica
    assert again["ticket"]["ticketId"] == first["ticket"]["ticketId"]

    # B parks a long poll through the proxy; A's release (through the proxy, likely on the
    # other replica) promotes B, and B's await answers before its 30 s are up.
    answered: dict[str, Any] = {}

    def park() -> None:
        body = {
            "lane": LANE,
            "machineId": "mB",
            "claimId": "c-mB",
            "ticketId": second["ticket"]["ticketId"],
            "waitSeconds": 30,
        }
        began = time.monotonic()
        answered["reply"] = op(ha.url, ha.token, "await", body, timeout=60)
        answered["seconds"] = time.monotonic() - began

    waiter = threading.Thread(target=park, daemon=True)
    waiter.start()
    time.sleep(1.0)
    assert waiter.is_alive()  # parked
    released = op(
        ha.url,
        ha.token,
        "release",
        {
            "lane": LANE,
            "machineId": "mA",
            "claimId": "c-mA",
            "ticketId": first["ticket"]["ticketId"],
            "outcome": "completed",
        },
    )
    assert released["released"] is True
    waiter.join(40)
    assert not waiter.is_alive()
    assert answered["reply"]["granted"] is True
    assert answered["seconds"] < 25
    for r in ha.replicas:  # both replicas see one lane state
        held = r.status(LANE)["held"]
        assert [t["ticketId"] for t in held] == [second["ticket"]["ticketId"]]


def test_kill9_one_replica_calls_keep_working_and_it_is_marked_unready(make_ha: Any) -> None:
    ha: Ha = make_ha(check_interval=1.0)
    dead, alive = ha.replicas
    acquire(ha.url, ha.token, "mA", "1")
    dead.kill9()
    killed_at = time.monotonic()
    for i in range(10):
        status, reply = http(
            ha.url, "/v1/lanes/status", ha.token, {"protocolVersion": 1, "lane": LANE}
        )
        assert status == 200, (i, reply)
        assert reply["coordinator"] == "actor-postgres"
    queued = acquire(ha.url, ha.token, "mB", "2")  # writes too, on the survivor
    assert queued["granted"] is False
    while readiness(ha.url)[dead.url]:
        assert time.monotonic() - killed_at < MARKED_UNREADY_WITHIN, "still marked ready"
        time.sleep(0.05)
    assert readiness(ha.url)[alive.url] is True
    assert any("replica.unready" in ln and dead.url in ln for ln in ha.proxy.lines)


def test_a_call_meeting_the_dead_replica_is_retried_on_the_other(make_ha: Any) -> None:
    """Checks every 60 s: only the retry (and the passive mark) can save these calls."""
    ha: Ha = make_ha(check_interval=60.0)
    dead, _ = ha.replicas
    dead.kill9()
    for i in range(6):  # round-robin: one of the first two starts with the dead replica
        status, reply = http(
            ha.url, "/v1/lanes/status", ha.token, {"protocolVersion": 1, "lane": LANE}
        )
        assert status == 200, (i, reply)
    retries = [ln for ln in ha.proxy.lines if " retry " in ln and dead.url in ln]
    assert len(retries) == 1, ha.proxy.text  # then marked unready: never tried again
    assert "connect-failed" in retries[0]
    assert readiness(ha.url)[dead.url] is False


# ---------------------------------------------------------------- make run-ha


def running(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaped, as PID 1 of a container leaves, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _banner_value(lines: list[str], label: str) -> str:
    for ln in lines:
        m = re.match(rf"\s+{re.escape(label)}\s+:\s+(\S+)", ln)
        if m:
            return m.group(1)
    raise AssertionError(f"no {label!r} line in:\n" + "\n".join(lines))


def test_run_ha_starts_prints_ports_and_token_and_stops_cleanly() -> None:
    """What `make run-ha` runs, in a temp folder, on free ports (slow: initdb included)."""
    base = Path(tempfile.mkdtemp(prefix="lane-run-ha-", dir=_temp_parent()))
    base.chmod(0o711)  # as root the server runs as `postgres` and must reach base/ha/pg
    ha_dir = base / "ha"
    args = [
        sys.executable,
        str(RUN_HA),
        "--dir",
        str(ha_dir),
        "--port",
        "0",
        "--replica-ports",
        "0,0",
        "--config",
        str(REPO / "deploy" / "example-config.toml"),
    ]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LANE_COORDINATOR_TOKEN", "LANE_COORDINATOR_STORE")
    }
    run = LineProcess(args, env)
    try:
        run.wait_for_line(lambda ln: ln.startswith("  stop ") and "Ctrl-C" in ln, 180)
        lines = list(run.lines)
        proxy_url = _banner_value(lines, "proxy")
        replica_urls = [_banner_value(lines, f"replica-{i}") for i in (1, 2)]
        token = _banner_value(lines, "token")
        ports = [int(u.rsplit(":", 1)[1]) for u in replica_urls]
        assert len(set(ports)) == 2 and all(p > 0 for p in ports)
        assert any(f"port {p}," in ln for p in ports for ln in lines)
        token_file = ha_dir / "token"
        assert token_file.read_text().split()[0] == token
        assert token_file.stat().st_mode & 0o777 == 0o600
        creds = ha_dir / "credentials"  # what the replicas read: the token's hash only
        assert creds.stat().st_mode & 0o777 == 0o600 and token not in creds.read_text()
        assert creds.read_text().endswith(" name=ha-admin role=admin\n")
        assert (ha_dir / "pgpass").stat().st_mode & 0o777 == 0o600
        status, reply = http(
            proxy_url,
            "/v1/lanes/status",
            token,
            {"protocolVersion": 1, "lane": "seedance-direct:main-unlimited"},
        )
        assert status == 200, reply
        assert reply["coordinator"] == "actor-postgres"
        assert set(readiness(proxy_url).values()) == {True}
        pid_file = ha_dir / "pg" / "data" / "postmaster.pid"
        postmaster = int(pid_file.read_text().split("\n", 1)[0])

        run.signal(signal.SIGINT)  # Ctrl-C
        assert run.wait(90) == 0, run.text
        assert "[run-ha] stopped" in run.text
        assert not pid_file.exists()  # PostgreSQL stopped (fast shutdown removes it)
        assert not running(postmaster)
        for url in [proxy_url, *replica_urls]:
            with pytest.raises(urllib.error.URLError):
                urllib.request.urlopen(url + "/healthz", timeout=5)
    finally:
        if run.proc.poll() is None:
            run.signal(signal.SIGINT)
            run.wait(90)
        shutil.rmtree(base, ignore_errors=True)
