"""What every bench shape shares: the token, the HTTP client, percentiles and the /proc
readings of a server process (CPU seconds, RSS, open file descriptors)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import secrets
import statistics
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

TOKEN = secrets.token_urlsafe(32)
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
CLIENT_TIMEOUT = aiohttp.ClientTimeout(total=120)  # an await parks for at most 60 s
T = TypeVar("T")
X = TypeVar("X")


class BenchError(RuntimeError):
    """A request the bench relies on did not succeed (the shape cannot be measured)."""


def pct(values: Iterable[float], q: float) -> float:
    """The q-th percentile (nearest rank); nan for no values."""
    s = sorted(values)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def median(values: Iterable[float]) -> float:
    s = list(values)
    return statistics.median(s) if s else float("nan")


def _proc_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """user+system CPU seconds a process has used (/proc/PID/stat utime+stime; 0.0 without
    /proc)."""
    try:
        fields = _proc_fields(pid)
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """Resident set size in MB (/proc/PID/status VmRSS; nan without /proc)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def fd_count(pid: int) -> int:
    """Open file descriptors of a process (entries of /proc/PID/fd; -1 without /proc)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def raise_own_fd_limit() -> None:
    """The bench itself holds a connection per parked await: soft RLIMIT_NOFILE to hard."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@contextlib.asynccontextmanager
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """One client session with an unbounded connection pool (one connection per concurrent
    request): the same load generator for the coordinator and the bare handler."""
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=CLIENT_TIMEOUT) as s:
        yield s


class Api:
    """POST /v1/lanes/<op> with the bearer token and protocolVersion 1."""

    def __init__(self, s: aiohttp.ClientSession, url: str) -> None:
        self.s = s
        self.url = url

    async def call(self, op: str, **body: Any) -> tuple[int, dict[str, Any]]:
        """(status, reply object); a reply that is not JSON reads as {}."""
        body["protocolVersion"] = 1
        async with self.s.post(f"{self.url}/v1/lanes/{op}", json=body, headers=HEADERS) as r:
            try:
                data = await r.json(content_type=None)
            except ValueError:
                data = None
            return r.status, data if isinstance(data, dict) else {}

    async def post(self, op: str, **body: Any) -> dict[str, Any]:
        """The reply; BenchError on any status >= 400."""
        status, data = await self.call(op, **body)
        if status >= 400:
            raise BenchError(f"{op} {body.get('lane')}: {status} {data.get('error', data)}")
        return data

    async def metric(self, name: str, timeout: float = 5.0) -> float | None:
        """A sample's value from GET /metrics (None when the series is absent)."""
        wait = aiohttp.ClientTimeout(total=timeout)
        async with self.s.get(f"{self.url}/metrics", headers=HEADERS, timeout=wait) as r:
            text = await r.text()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None


def ticket_id(reply: dict[str, Any]) -> str:
    """The ticket id of an acquire/await reply ("x" for the bare handler's echo)."""
    ticket = reply.get("ticket")
    return str(ticket.get("ticketId", "x")) if isinstance(ticket, dict) else "x"


async def bounded(n: int, fn: Callable[[X], Awaitable[T]], items: Iterable[X]) -> list[T]:
    """fn(item) for every item with at most n running at once (n clients); results in order."""
    sem = asyncio.Semaphore(n)

    async def one(item: X) -> T:
        async with sem:
            return await fn(item)

    return list(await asyncio.gather(*(one(i) for i in items)))


class Tally:
    """Requests that may fail and are counted rather than raised: every non-2xx reply and
    every failed request is an error (the first few distinct ones kept as examples)."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.requests = 0
        self.errors = 0
        self.examples: list[str] = []

    async def call(self, op: str, **body: Any) -> dict[str, Any]:
        """The reply, or {} after an error."""
        self.requests += 1
        try:
            status, data = await self.api.call(op, **body)
        except (aiohttp.ClientError, TimeoutError) as exc:
            status, data = 0, {"error": f"{type(exc).__name__}: {exc}"}
        if 200 <= status < 300:
            return data
        self.errors += 1
        err = data.get("error", data)
        if isinstance(err, dict):
            err = f"{err.get('code')}: {err.get('message')}"
        what = f"{op} {status}: {str(err)[:160]}"
        if len(self.examples) < 3 and what not in self.examples:
            self.examples.append(what)
        return {}
