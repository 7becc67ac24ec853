"""Helpers for the browser tests: the coordinators they look at, seeded over plain HTTP.

No pytest-aiohttp here: the browser tests run in their own pytest process
(`pytest -p no:asyncio tests/ui`). `start_ui_coordinator` runs `lane-coordinator serve` as a
subprocess (tests/harness `CoordinatorProcess`) that `seed`/`seed_many_lanes` fill with urllib;
`start_timeline_demo` runs one in-process on a loop thread (`ThreadedCoordinator`) whose
ManualClock is walked through three hours of holds (see `walk_timeline`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import rfc8785

from coordinator.clock import ManualClock
from coordinator.config import Config
from tests.harness import CoordinatorProcess, ThreadedCoordinator
from tests.harness.credentials import Cred, write_credentials

MAIN = "seedance-direct:main"  # capacity 1: a holder, two waiters, a render log, receipts
POOL = "kling:team"  # capacity 2: paused by a provider human check
SHORT = "veo:short"  # capacity 1: a 15 s lease nobody heartbeats (expires)
PROBE = "probe:live"  # capacity 1: used only by the live-refresh test


def ui_config() -> Config:
    return Config(
        default_lease_seconds=600,
        waiter_timeout_seconds=7200,
        default_hold_seconds=300,
        routes={"seedance-direct": 1, "kling": 2, "veo": 1, "probe": 1},
        lanes={},
    )


XSS_PROJECT = '<img src=x onerror="window.__xss=1">'
XSS_SCENE = "<b>bold</b>"
XSS_NOTE = "<script>window.__xss=2</script>"


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
    token: str  # the reader credential's: what the page is unlocked with
    api: Api  # writes with the admin credential
    main_held: dict[str, Any]
    main_queued: list[dict[str, Any]]
    mismatch_ticket: dict[str, Any]
    pool_pauser: dict[str, Any]
    short_ticket: dict[str, Any]
    history_by_project: dict[str, int]


# The UI coordinators' credentials (docs/protocol.md#credentials): the seeding writes as the
# admin; the page is unlocked with the reader unless a test says otherwise.
UI_ADMIN = Cred("ops", "admin")
UI_READER = Cred("control-room", "reader")
UI_DRIVER = Cred("studio-a", "driver", "studio-a")
UI_CREDENTIALS = (UI_ADMIN, UI_READER, UI_DRIVER)


def start_ui_coordinator(tmp: Path) -> CoordinatorProcess:
    """`lane-coordinator serve` with `ui_config()`, data and token file in `tmp`; the file holds
    UI_CREDENTIALS, and the process's `token` is the admin's (what seeding writes with)."""
    tokens = write_credentials(tmp / "token", UI_CREDENTIALS)
    proc = CoordinatorProcess(tmp / "data", tokens, ui_config(), log_level="warning")
    proc.token = UI_ADMIN.token
    return proc


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
        token=UI_READER.token,  # what the page is unlocked with: it only reads
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


# ---------------------------------------------------------------- the timeline demo

TIMELINE_MAIN = "seedance-direct:main-unlimited"
TIMELINE_POOL = "kling:team"


def timeline_config() -> Config:
    return Config(
        waiter_timeout_seconds=7200,
        default_hold_seconds=600,
        routes={"seedance-direct": 1, "kling": 2},
        lanes={},
    )


async def walk_timeline(base: str, token: str, clock: ManualClock, now0: float) -> None:
    """Seed the coordinator at `base` over HTTP while moving its ManualClock, minutes before
    `now0` (the clock only moves forward):

    seedance-direct:main-unlimited (capacity 1)
      -200..-188 studio-a completed (before the 3 h window)
      -185..-170 studio-b completed (clipped at the window's start, -180)
      -165..-145 studio-a failed        -143..-129 studio-c completed
      -94 studio-b holds with a 15 min lease and goes silent -> expired at -79
      -76 studio-a holds; -68 reports a human check (pause until -48); -66 not-submitted
      -60 studio-b waits (paused) -> promoted at -48 when the pause ends; -32 completed
      -28..-15 studio-c timeout         -6 studio-a holds (now); -3 studio-b waits
      idle gaps: 5, 2, 35, 3, 18, 4, 9 min -> idle 76 min, longest 35 min, busy 58 %, paused 20 min
    kling:team (capacity 2): two slots of overlapping holds.
    """
    headers = {"Authorization": f"Bearer {token}"}

    async with aiohttp.ClientSession(headers=headers) as http:

        async def call(op: str, **body: Any) -> Any:
            async with http.post(f"{base}/v1/lanes/{op}", json={"protocolVersion": 1, **body}) as r:
                reply = await r.json()
                assert r.status in (200, 201), (op, r.status, reply)
                return reply

        async def at(minutes: float) -> None:
            clock.set(now0 + minutes * 60)
            await asyncio.sleep(0.15)  # let lane alarms reap/promote and commit

        async def acquire(
            lane: str, machine: str, project: str, scene: str, lease: float = 3600
        ) -> dict[str, Any]:
            reply = await call(
                "acquire",
                lane=lane,
                machineId=machine,
                claimId=f"{machine}-{scene}",
                project=project,
                scene=scene,
                leaseSeconds=lease,
                promptHash=hashlib.sha256(scene.encode()).hexdigest()[:20],
            )
            ticket: dict[str, Any] = reply["ticket"]
            return ticket

        async def release(lane: str, t: dict[str, Any], outcome: str) -> None:
            await call(
                "release",
                lane=lane,
                machineId=t["machineId"],
                claimId=t["claimId"],
                ticketId=t["ticketId"],
                outcome=outcome,
            )

        # Both lanes, in time order (the clock only moves forward).
        await at(-200)
        a = await acquire(TIMELINE_MAIN, "studio-a", "alpha-film", "s01")
        await at(-188)
        await release(TIMELINE_MAIN, a, "completed")
        await at(-185)
        b = await acquire(TIMELINE_MAIN, "studio-b", "beta-ad", "s01")
        await at(-170)
        await release(TIMELINE_MAIN, b, "completed")
        k1 = await acquire(TIMELINE_POOL, "studio-d", "gamma-promo", "k1")
        await at(-165)
        c = await acquire(TIMELINE_MAIN, "studio-a", "alpha-film", "s02")
        await at(-160)
        k2 = await acquire(TIMELINE_POOL, "studio-e", "delta-spot", "k2")
        await at(-145)
        await release(TIMELINE_MAIN, c, "failed")
        await at(-143)
        d = await acquire(TIMELINE_MAIN, "studio-c", "alpha-film", "s03")
        await at(-135)
        await release(TIMELINE_POOL, k2, "completed")
        await at(-130)
        await release(TIMELINE_POOL, k1, "completed")
        await at(-129)
        await release(TIMELINE_MAIN, d, "completed")
        await at(-120)
        k3 = await acquire(TIMELINE_POOL, "studio-d", "gamma-promo", "k3")
        await at(-100)
        k4 = await acquire(TIMELINE_POOL, "studio-e", "delta-spot", "k4")
        await at(-94)
        silent = await acquire(TIMELINE_MAIN, "studio-b", "beta-ad", "s02", lease=15 * 60)
        assert silent["state"] == "held", silent
        await at(-90)
        await release(TIMELINE_POOL, k3, "completed")
        await at(-79)  # the alarm expires the silent lease
        await at(-76)
        f = await acquire(TIMELINE_MAIN, "studio-a", "alpha-film", "s04")
        assert f["state"] == "held", f
        await at(-68)
        await call(
            "cooldown",
            lane=TIMELINE_MAIN,
            machineId=f["machineId"],
            claimId=f["claimId"],
            ticketId=f["ticketId"],
            reasonCode="provider-human-check",
            retryAfterSeconds=20 * 60,
        )
        await at(-66)
        await release(TIMELINE_MAIN, f, "not-submitted")
        await at(-60)
        g = await acquire(TIMELINE_MAIN, "studio-b", "beta-ad", "s03")
        assert g["state"] == "queued", g
        await at(-50)
        await acquire(TIMELINE_POOL, "studio-d", "gamma-promo", "k5")
        await at(-48)  # the pause ends; the alarm promotes g
        await at(-45)
        await release(TIMELINE_POOL, k4, "lease-lost")
        await at(-32)
        await release(TIMELINE_MAIN, g, "completed")
        await at(-30)
        k6 = await acquire(TIMELINE_POOL, "studio-e", "delta-spot", "k6")
        await at(-28)
        h = await acquire(TIMELINE_MAIN, "studio-c", "alpha-film", "s05")
        await at(-25)
        await release(TIMELINE_POOL, k6, "slot-busy")
        await at(-15)
        await release(TIMELINE_MAIN, h, "timeout")
        await at(-6)
        await acquire(TIMELINE_MAIN, "studio-a", "alpha-film", "s06")
        await at(-3)
        await acquire(TIMELINE_MAIN, "studio-b", "beta-ad", "s07")


def start_timeline_demo(tmp: Path) -> ThreadedCoordinator:
    """A real coordinator (create_app, SQLite in `tmp`) on a loop thread whose ManualClock was
    walked through the last three hours (`walk_timeline`), then set to the real time once:
    the control room's timeline has hours of history to draw."""
    now0 = time.time()
    clock = ManualClock(start=now0 - 200 * 60)
    coord = ThreadedCoordinator(
        tmp / "data", config=timeline_config(), clock=clock, credentials=[UI_READER]
    )
    try:
        coord.call(lambda: walk_timeline(coord.url, coord.token, clock, now0), timeout=120)

        async def to_real_time() -> None:  # on the loop, where the clock's sleepers live
            clock.set(time.time())

        coord.call(to_real_time)
    except BaseException:
        coord.stop()
        raise
    return coord
