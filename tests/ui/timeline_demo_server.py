"""A real coordinator (create_app, SQLite in a temp dir) whose clock was walked through
the last three hours, so the control room's timeline has hours of history to draw.

Run as a subprocess by the browser tests:
    python timeline_demo_server.py PORT DATA_DIR      (token in LANE_COORDINATOR_TOKEN)
It seeds itself over HTTP while moving a ManualClock, sets the clock to the real time,
prints READY and serves until terminated. The scenario (minutes before "now"):

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

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from coordinator.clock import ManualClock
from coordinator.config import load_config
from coordinator.http.app import create_app
from coordinator.logs import configure_logging

MAIN = "seedance-direct:main-unlimited"
POOL = "kling:team"

CONFIG = """
waiter_timeout_seconds = 7200
default_hold_seconds = 600
[routes."seedance-direct"]
capacity = 1
[routes."kling"]
capacity = 2
"""


async def main(port: int, data_dir: Path) -> None:
    configure_logging("warning")
    token = os.environ["LANE_COORDINATOR_TOKEN"]
    cfg_path = data_dir.parent / "demo.toml"
    cfg_path.write_text(CONFIG)
    config = load_config(cfg_path)
    now0 = time.time()
    clock = ManualClock(start=now0 - 200 * 60)
    app = create_app(config, [token.encode()], data_dir, clock=clock)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    base = f"http://127.0.0.1:{port}"
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
        a = await acquire(MAIN, "studio-a", "alpha-film", "s01")
        await at(-188)
        await release(MAIN, a, "completed")
        await at(-185)
        b = await acquire(MAIN, "studio-b", "beta-ad", "s01")
        await at(-170)
        await release(MAIN, b, "completed")
        k1 = await acquire(POOL, "studio-d", "gamma-promo", "k1")
        await at(-165)
        c = await acquire(MAIN, "studio-a", "alpha-film", "s02")
        await at(-160)
        k2 = await acquire(POOL, "studio-e", "delta-spot", "k2")
        await at(-145)
        await release(MAIN, c, "failed")
        await at(-143)
        d = await acquire(MAIN, "studio-c", "alpha-film", "s03")
        await at(-135)
        await release(POOL, k2, "completed")
        await at(-130)
        await release(POOL, k1, "completed")
        await at(-129)
        await release(MAIN, d, "completed")
        await at(-120)
        k3 = await acquire(POOL, "studio-d", "gamma-promo", "k3")
        await at(-100)
        k4 = await acquire(POOL, "studio-e", "delta-spot", "k4")
        await at(-94)
        silent = await acquire(MAIN, "studio-b", "beta-ad", "s02", lease=15 * 60)
        assert silent["state"] == "held", silent
        await at(-90)
        await release(POOL, k3, "completed")
        await at(-79)  # the alarm expires the silent lease
        await at(-76)
        f = await acquire(MAIN, "studio-a", "alpha-film", "s04")
        assert f["state"] == "held", f
        await at(-68)
        await call(
            "cooldown",
            lane=MAIN,
            machineId=f["machineId"],
            claimId=f["claimId"],
            ticketId=f["ticketId"],
            reasonCode="provider-human-check",
            retryAfterSeconds=20 * 60,
        )
        await at(-66)
        await release(MAIN, f, "not-submitted")
        await at(-60)
        g = await acquire(MAIN, "studio-b", "beta-ad", "s03")
        assert g["state"] == "queued", g
        await at(-50)
        await acquire(POOL, "studio-d", "gamma-promo", "k5")
        await at(-48)  # the pause ends; the alarm promotes g
        await at(-45)
        await release(POOL, k4, "lease-lost")
        await at(-32)
        await release(MAIN, g, "completed")
        await at(-30)
        k6 = await acquire(POOL, "studio-e", "delta-spot", "k6")
        await at(-28)
        h = await acquire(MAIN, "studio-c", "alpha-film", "s05")
        await at(-25)
        await release(POOL, k6, "slot-busy")
        await at(-15)
        await release(MAIN, h, "timeout")
        await at(-6)
        await acquire(MAIN, "studio-a", "alpha-film", "s06")
        await at(-3)
        await acquire(MAIN, "studio-b", "beta-ad", "s07")

    # The scenario was walked on the clock above; from now on it reads the real time once.
    clock.set(time.time())
    print("READY", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), Path(sys.argv[2])))
