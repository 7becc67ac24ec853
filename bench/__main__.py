"""lane-coordinator benchmarks. Run with `make bench`; prints figures.

1. durable acquire+release cycles/s on one lane vs a bare aiohttp JSON handler (ratio)
2. release -> parked await returns: p50/p99
3. lease expiry -> promotion by the alarm: p50/p99 lateness
4. acquire and status latency with 10 vs 10,000 queued tickets in one lane
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

TOKEN = secrets.token_urlsafe(32)
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "16"))
CYCLES = int(os.environ.get("BENCH_CYCLES", "2000"))
WAKE_SAMPLES = int(os.environ.get("BENCH_WAKE_SAMPLES", "200"))
ALARM_LANES = int(os.environ.get("BENCH_ALARM_LANES", "60"))
BIG_QUEUE = int(os.environ.get("BENCH_BIG_QUEUE", "10000"))
LAT_SAMPLES = int(os.environ.get("BENCH_LAT_SAMPLES", "300"))

CONFIG = """
default_lease_seconds = 300
[routes."bench"]
capacity = 1
[routes."wide"]
capacity = 10000
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def cpu_seconds(pid: int) -> float:
    """user+system CPU seconds a process has used (Linux /proc; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Served:
    url: str
    pid: int


@contextlib.contextmanager
def server(kind: str, tmp: Path) -> Iterator[Served]:
    port = free_port()
    env = dict(os.environ, LANE_COORDINATOR_TOKEN=TOKEN)
    if kind == "coordinator":
        cfg = tmp / "bench.toml"
        cfg.write_text(CONFIG)
        data = tmp / f"data-{port}"
        cmd = [
            sys.executable,
            "-m",
            "coordinator.cli",
            "serve",
            "--port",
            str(port),
            "--data-dir",
            str(data),
            "--config",
            str(cfg),
            "--log-level",
            "warning",
        ]
    else:
        cmd = [sys.executable, "-m", "bench.bare_server", str(port)]
    log = (tmp / f"{kind}-{port}.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            break
        time.sleep(0.05)
    try:
        yield Served(url, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


class Api:
    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.s = session
        self.url = url

    async def post(self, op: str, **body: Any) -> dict[str, Any]:
        body["protocolVersion"] = 1
        async with self.s.post(
            f"{self.url}/v1/lanes/{op}", json=body, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as r:
            data: dict[str, Any] = await r.json()
            if r.status >= 400:
                raise RuntimeError(f"{op}: {r.status} {data}")
            return data


async def cycles(srv: Served, lane: str) -> tuple[float, float]:
    """acquire+release cycles per second with CONCURRENCY clients, and the server's CPU
    microseconds per cycle (independent of how much CPU the load generator took)."""
    url = srv.url
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        api = Api(s, url)
        per = CYCLES // CONCURRENCY

        async def worker(w: int) -> None:
            for i in range(per):
                a = await api.post(
                    "acquire",
                    lane=lane,
                    machineId=f"m{w}",
                    project=f"p{w}",
                    scene="s",
                    promptHash=f"h{w}-{i}",
                )
                await api.post(
                    "release",
                    lane=lane,
                    machineId=f"m{w}",
                    ticketId=a.get("ticket", {}).get("ticketId", "x"),
                    outcome="completed",
                )

        await worker(999)  # warm up the lane (open, migrate)
        cpu0, t0 = cpu_seconds(srv.pid), time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
        n = per * CONCURRENCY
        return n / (time.perf_counter() - t0), (cpu_seconds(srv.pid) - cpu0) / n * 1e6


async def wake_gap(url: str) -> list[float]:
    """ms from sending a release to the parked waiter's await returning."""
    out: list[float] = []
    async with aiohttp.ClientSession() as s:
        api = Api(s, url)
        lane = "bench:wake"
        for i in range(WAKE_SAMPLES):
            a = await api.post(
                "acquire", lane=lane, machineId="A", project="a", scene="s", promptHash=f"a{i}"
            )
            b = await api.post(
                "acquire", lane=lane, machineId="B", project="b", scene="s", promptHash=f"b{i}"
            )
            tb = b["ticket"]["ticketId"]
            waiter = asyncio.create_task(
                api.post("await", lane=lane, machineId="B", ticketId=tb, waitSeconds=30)
            )
            await asyncio.sleep(0.01)  # let the await park
            t0 = time.perf_counter()
            await api.post(
                "release",
                lane=lane,
                machineId="A",
                ticketId=a["ticket"]["ticketId"],
                outcome="completed",
            )
            r = await waiter
            out.append((time.perf_counter() - t0) * 1000)
            assert r["granted"], r
            await api.post("release", lane=lane, machineId="B", ticketId=tb, outcome="completed")
    return out


async def alarm_lateness(url: str) -> list[float]:
    """ms between a lease's leaseExpiresAt and its waiter's await returning granted."""
    out: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        api = Api(s, url)

        async def one(i: int) -> None:
            lane = f"bench:alarm-{i}"
            await asyncio.sleep(i * 0.02)  # spread expiries
            a = await api.post(
                "acquire",
                lane=lane,
                machineId="A",
                project="a",
                scene="s",
                promptHash="a",
                leaseSeconds=15,
            )
            b = await api.post(
                "acquire", lane=lane, machineId="B", project="b", scene="s", promptHash="b"
            )
            expires = a["ticket"]["leaseExpiresAt"]
            while True:
                r = await api.post(
                    "await",
                    lane=lane,
                    machineId="B",
                    ticketId=b["ticket"]["ticketId"],
                    waitSeconds=30,
                )
                if r["ticket"]["state"] != "queued":
                    break
            out.append((time.time() - expires) * 1000)
            assert r["granted"], r

        await asyncio.gather(*(one(i) for i in range(ALARM_LANES)))
    return out


async def latency_vs_queue(url: str) -> dict[int, tuple[float, float]]:
    """p50 ms of acquire (new identity) and status with n queued tickets."""
    res: dict[int, tuple[float, float]] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as s:
        api = Api(s, url)
        for n in (10, BIG_QUEUE):
            lane = f"bench:q{n}"
            await api.post(
                "acquire",
                lane=lane,
                machineId="H",
                project="h",
                scene="s",
                promptHash="holder",
                leaseSeconds=3600,
            )
            sem = asyncio.Semaphore(64)

            async def fill(i: int, lane: str = lane, sem: asyncio.Semaphore = sem) -> None:
                async with sem:
                    await api.post(
                        "acquire",
                        lane=lane,
                        machineId=f"m{i % 7}",
                        project=f"p{i % 5}",
                        scene="s",
                        promptHash=f"f{i}",
                    )

            await asyncio.gather(*(fill(i) for i in range(n)))
            acq, st = [], []
            for i in range(LAT_SAMPLES):
                t0 = time.perf_counter()
                await api.post(
                    "acquire",
                    lane=lane,
                    machineId="x",
                    project=f"p{i % 5}",
                    scene="s",
                    promptHash=f"probe{i}",
                )
                acq.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                await api.post("status", lane=lane)
                st.append((time.perf_counter() - t0) * 1000)
            res[n] = (statistics.median(acq), statistics.median(st))
    return res


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="lane-bench-") as tmpd:
        tmp = Path(tmpd)
        print(
            f"# lane-coordinator bench  (concurrency {CONCURRENCY}, {CYCLES} cycles, "
            f"{os.cpu_count()} cpus, data in {tmp})"
        )
        with server("bare", tmp) as srv:
            bare, bare_cpu = await cycles(srv, "bench:bare")
        with server("coordinator", tmp) as srv:
            url = srv.url
            durable, durable_cpu = await cycles(srv, "bench:cycles")
            print(
                f"1. acquire+release cycles/s: coordinator {durable:.0f}, bare aiohttp "
                f"{bare:.0f}, ratio {durable / bare:.2f}x (target >= 0.7x); server CPU per "
                f"cycle: coordinator {durable_cpu:.0f} us, bare {bare_cpu:.0f} us "
                f"(ratio {bare_cpu / durable_cpu:.2f}x)"
            )
            wake = await wake_gap(url)
            print(
                f"2. release -> await returns: p50 {pct(wake, 50):.1f} ms, "
                f"p99 {pct(wake, 99):.1f} ms (n={len(wake)}, includes the release round "
                "trip; target p99 < 20 ms)"
            )
            late = await alarm_lateness(url)
            print(
                f"3. lease expiry -> promotion seen by the waiter: p50 {pct(late, 50):.1f} ms, "
                f"p99 {pct(late, 99):.1f} ms (n={len(late)}; target p99 < 50 ms)"
            )
            lat = await latency_vs_queue(url)
            (a10, s10), (abig, sbig) = lat[10], lat[BIG_QUEUE]
            print(
                f"4. p50 latency with 10 vs {BIG_QUEUE} queued: acquire {a10:.2f} -> "
                f"{abig:.2f} ms ({abig / a10:.2f}x), status {s10:.2f} -> {sbig:.2f} ms "
                f"({sbig / s10:.2f}x); status lists at most 200 queued"
            )


if __name__ == "__main__":
    asyncio.run(main())
