"""Plain-HTTP helpers for the browser tests: start a real coordinator, seed it with urllib.

No pytest-aiohttp here: the browser tests run in their own pytest process
(`pytest -p no:asyncio tests/ui`) against a coordinator started as a subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rfc8785

MAIN = "seedance-direct:main"  # capacity 1: a holder, two waiters, a render log, receipts
POOL = "kling:team"  # capacity 2: paused by a provider human check
SHORT = "veo:short"  # capacity 1: a 15 s lease nobody heartbeats (expires)
PROBE = "probe:live"  # capacity 1: used only by the live-refresh test

CONFIG_TOML = """
default_lease_seconds = 600
waiter_timeout_seconds = 7200
default_hold_seconds = 300

[routes."seedance-direct"]
capacity = 1

[routes."kling"]
capacity = 2

[routes."veo"]
capacity = 1

[routes."probe"]
capacity = 1
"""

XSS_PROJECT = '<img src=x onerror="window.__xss=1">'
XSS_SCENE = "<b>bold</b>"
XSS_NOTE = "<script>window.__xss=2</script>"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_healthy(base: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"coordinator exited early:\n{log.read_text(errors='replace')}")
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"coordinator did not become healthy:\n{log.read_text(errors='replace')}")


def receipt_hash(payload: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(bytes(rfc8785.dumps(payload))).hexdigest()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Api:
    base: str
    token: str
    calls: list[str] = field(default_factory=list)

    def _send(self, req: urllib.request.Request) -> tuple[int, Any]:
        req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def post(self, op: str, body: dict[str, Any], expect: tuple[int, ...] = (200, 201)) -> Any:
        data = json.dumps({"protocolVersion": 1, **body}).encode()
        req = urllib.request.Request(
            f"{self.base}/v1/lanes/{op}",
            data=data,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        status, reply = self._send(req)
        assert status in expect, (op, status, reply)
        return reply

    def get(self, path: str) -> Any:
        status, reply = self._send(urllib.request.Request(self.base + path))
        assert status == 200, (path, status, reply)
        return reply

    def acquire(
        self,
        lane: str,
        machine: str,
        project: str,
        scene: str,
        *,
        claim: str | None = None,
        lease: float | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "lane": lane,
            "machineId": machine,
            "claimId": claim or f"{machine}-claim-{scene}",
            "project": project,
            "scene": scene,
            "promptHash": hashlib.sha256(f"{project}/{scene}".encode()).hexdigest()[:24],
        }
        if lease is not None:
            body["leaseSeconds"] = lease
        reply: dict[str, Any] = self.post("acquire", body)
        return reply

    def release(
        self, lane: str, ticket: dict[str, Any], outcome: str | None, **extra: Any
    ) -> dict[str, Any]:
        reply: dict[str, Any] = self.post(
            "release",
            {
                "lane": lane,
                "machineId": ticket["machineId"],
                "claimId": ticket["claimId"],
                "ticketId": ticket["ticketId"],
                "outcome": outcome,
                **extra,
            },
        )
        return reply

    def receipt(
        self,
        lane: str,
        ticket: dict[str, Any],
        phase: str,
        payload: dict[str, Any],
        *,
        tamper: bool = False,
    ) -> dict[str, Any]:
        good = receipt_hash(payload)
        sent = "sha256:" + hashlib.sha256(b"not the payload").hexdigest() if tamper else good
        reply: dict[str, Any] = self.post(
            "receipt",
            {
                "lane": lane,
                "machineId": ticket["machineId"],
                "claimId": ticket["claimId"],
                "ticketId": ticket["ticketId"],
                "phase": phase,
                "payload": payload,
                "receiptId": f"{ticket['ticketId']}:{phase}:{sent.removeprefix('sha256:')[:16]}",
                "contentHash": sent,
            },
        )
        return reply


@dataclass
class Seeded:
    base: str
    token: str
    api: Api
    main_held: dict[str, Any]
    main_queued: list[dict[str, Any]]
    mismatch_ticket: dict[str, Any]
    pool_pauser: dict[str, Any]
    short_ticket: dict[str, Any]
    history_by_project: dict[str, int]


def start_coordinator(tmp: Path) -> tuple[subprocess.Popen[bytes], str, str, Path]:
    token = secrets.token_urlsafe(36)
    port = free_port()
    config = tmp / "coordinator.toml"
    config.write_text(CONFIG_TOML)
    data = tmp / "data"
    log = tmp / "coordinator.log"
    exe = Path(sys.executable).with_name("lane-coordinator")
    env = {**os.environ, "LANE_COORDINATOR_TOKEN": token}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(exe),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--data-dir",
                str(data),
                "--config",
                str(config),
                "--log-level",
                "warning",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, proc, log)
    return proc, base, token, log


def seed(base: str, token: str) -> Seeded:
    api = Api(base, token)

    # veo:short — a 15 s lease that nobody heartbeats: the alarm expires it.
    short = api.acquire(SHORT, "studio-a", "alpha-film", "teaser", lease=15)["ticket"]

    # seedance-direct:main — a render log across two projects, with receipts.
    plan = [
        ("studio-a", "alpha-film", "s01", "completed"),
        ("studio-b", "beta-ad", "s01", "completed"),
        ("studio-a", "alpha-film", "s02", "failed"),
        ("studio-b", "beta-ad", "s02", "completed"),
        ("studio-c", "alpha-film", "s03", "not-submitted"),
        ("studio-b", "beta-ad", "s03", "timeout"),
        ("studio-a", "alpha-film", "s04", "completed"),
        ("studio-c", "beta-ad", "s04", "slot-busy"),
    ]
    by_project: dict[str, int] = {}
    mismatch: dict[str, Any] | None = None
    for machine, project, scene, outcome in plan:
        reply = api.acquire(MAIN, machine, project, scene)
        assert reply["granted"], reply
        t = reply["ticket"]
        api.receipt(MAIN, t, "lease-acquired", {"fence": t["fence"], "refs": 2})
        extra: dict[str, Any] = {}
        if outcome == "completed":
            tamper = project == "beta-ad" and scene == "s02"
            api.receipt(MAIN, t, "provider-submitted", {"job": f"job-{scene}"}, tamper=tamper)
            api.receipt(MAIN, t, "provider-terminal", {"job": f"job-{scene}", "ok": True})
            extra["providerJobId"] = f"job-{project}-{scene}"
            if tamper:
                mismatch = t
        api.release(MAIN, t, outcome, **extra)
        by_project[project] = by_project.get(project, 0) + 1
    assert mismatch is not None

    # A row whose strings are hostile markup: the page must show them as text.
    x = api.acquire(MAIN, "studio-c", XSS_PROJECT, XSS_SCENE)["ticket"]
    api.release(MAIN, x, "failed", note=XSS_NOTE)
    by_project[XSS_PROJECT] = 1

    # The current holder, two waiters in promotion order, a deduplicated collision.
    held = api.acquire(MAIN, "studio-a", "alpha-film", "s05", lease=3600)
    assert held["granted"], held
    h = held["ticket"]
    api.receipt(MAIN, h, "lease-acquired", {"fence": h["fence"], "refs": 3})
    api.receipt(MAIN, h, "references-applied", {"count": 3})
    q1 = api.acquire(MAIN, "studio-b", "beta-ad", "s05")["ticket"]
    q2 = api.acquire(MAIN, "studio-c", "alpha-film", "s06")["ticket"]
    dup = api.acquire(MAIN, "studio-b", "alpha-film", "s05", claim="studio-b-other-claim")
    assert dup["duplicate"] and not dup["granted"], dup

    # kling:team — a human check pauses the lane; the reporter gives its slot back.
    c1 = api.acquire(POOL, "studio-c", "gamma-promo", "p01", lease=3600)["ticket"]
    c2 = api.acquire(POOL, "studio-d", "gamma-promo", "p02", lease=3600)["ticket"]
    api.post(
        "cooldown",
        {
            "lane": POOL,
            "machineId": "studio-c",
            "claimId": c1["claimId"],
            "ticketId": c1["ticketId"],
            "reasonCode": "provider-human-check",
            "retryAfterSeconds": 1800,
        },
    )
    api.release(POOL, c1, "not-submitted")
    waiting = api.acquire(POOL, "studio-e", "delta-spot", "d01")
    assert waiting["ticket"]["state"] == "queued" and waiting["pause"], waiting
    assert c2["state"] == "held"

    return Seeded(
        base=base,
        token=token,
        api=api,
        main_held=h,
        main_queued=[q1, q2],
        mismatch_ticket=mismatch,
        pool_pauser=c1,
        short_ticket=short,
        history_by_project=by_project,
    )


def many_lane_name(i: int) -> str:
    return f"probe:acct-{i:02d}"


def many_lane_projects(i: int) -> tuple[str, str]:
    """Each lane's own two projects: no project is shared between lanes."""
    return f"proj-{i:02d}-finished", f"proj-{i:02d}-running"


def seed_many_lanes(base: str, token: str, n: int) -> list[str]:
    """`n` enforced lanes (route `probe`, capacity 1), each with its own two projects: a
    finished render (history), a holder with a receipt, and a waiter."""
    api = Api(base, token)
    lanes = []
    for i in range(1, n + 1):
        lane = many_lane_name(i)
        done_p, live_p = many_lane_projects(i)
        t = api.acquire(lane, f"rig-{i % 7}", done_p, "s01")["ticket"]
        api.release(lane, t, "completed", providerJobId=f"job-{i}")
        held = api.acquire(lane, f"rig-{i % 7}", live_p, "s02", lease=3600)["ticket"]
        api.receipt(lane, held, "lease-acquired", {"fence": held["fence"]})
        api.acquire(lane, f"rig-{(i + 1) % 7}", live_p, "s03")
        lanes.append(lane)
    return lanes
