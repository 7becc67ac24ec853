"""Where ours spends its CPU, measured in the same run as the peer table: py-spy
(`record -f raw --gil`, the samples taken while a thread holds the GIL) on our server during
one more 100 lanes × 1 client window, each sample counted against the module of its innermost
Python frame, grouped by role (aiohttp, asyncio, our HTTP layer, actor, engine, protocol,
store, metrics and logs). A MISS of the CPU targets is printed with this profile beside it
(bench/peers/table.py); docs/performance.md#the-targets says what stands behind each share.

py-spy is a dev dependency (`make setup`); where it is missing or may not attach (no ptrace
permission) the profile is SKIPPED with the reason."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.peers.base import System
from bench.peers.shapes import throughput

SAMPLE_RATE = 200  # samples per second
SHOWN = 6  # groups named in the one-line summary, largest first

METRICS_AND_LOGS = (
    "prometheus_client/",
    "structlog/",
    "coordinator/metrics.py",
    "coordinator/logs.py",
)
# (group, path fragments of the innermost frame's file), the first match wins
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("aiohttp", ("aiohttp/", "multidict/", "yarl/")),
    ("asyncio", ("asyncio/", "selectors.py", "concurrent/futures/", "threading.py", "queue.py")),
    ("our HTTP layer", ("coordinator/http/",)),
    ("actor", ("coordinator/actor/", "coordinator/service.py")),
    ("engine", ("coordinator/engine/", "sortedcontainers/")),
    ("protocol", ("coordinator/protocol/", "msgspec/")),
    ("store", ("coordinator/store/", "psycopg/", "sqlite3/")),
    ("metrics and logs", METRICS_AND_LOGS),
    ("dataclass constructors", ("<string>",)),
)
OTHER = "other"
_FILE = re.compile(r"\(([^():]+)(?::\d+)?\)$")


@dataclass(frozen=True, slots=True)
class Profile:
    samples: int
    shares: dict[str, float]  # group -> fraction of the samples, largest first

    def shares_text(self, limit: int | None = None, digits: int = 1) -> str:
        """`group N%, ...`, largest first (the first `limit` groups; None: all)."""
        top = list(self.shares.items())[:limit]
        return ", ".join(f"{g} {share * 100:.{digits}f}%" for g, share in top)

    def summary(self) -> str:
        return f"{self.samples:,} samples: {self.shares_text(SHOWN, 0)}"


def group_of(frame: str) -> str:
    """The group of one py-spy frame, `function (path:line)`."""
    m = _FILE.search(frame)
    path = m.group(1) if m else frame
    for group, fragments in GROUPS:
        if any(f in path for f in fragments):
            return group
    return OTHER


def parse_raw(text: str) -> Profile:
    """py-spy's raw format: one `frame;frame;...;innermost count` line per distinct stack."""
    counts: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        stack, _, n = line.rstrip().rpartition(" ")
        if not stack or not n.isdigit():
            continue
        counts[group_of(stack.split(";")[-1])] += int(n)
    total = sum(counts.values())
    shares = {g: c / total for g, c in counts.most_common()} if total else {}
    return Profile(total, shares)


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"  # the venv's, as `make setup` installs it
    return str(beside) if beside.exists() else shutil.which("py-spy")


async def profiled(system: System, lanes: list[str], seconds: float, out: Path) -> Profile | str:
    """The profile of the system's first server under len(lanes) × 1 client for `seconds`,
    or why there is none."""
    exe = py_spy()
    if exe is None:
        return "py-spy is not installed (make setup installs it)"
    pid = system.pids()["server"][0]
    window = max(1, round(seconds))  # py-spy records whole seconds
    cmd = [exe, "record", "-f", "raw", "--gil", "-r", str(SAMPLE_RATE)]
    cmd += ["-d", str(window), "-p", str(pid), "-o", str(out), "--nonblocking"]
    spy = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    try:
        await throughput(system, lanes, 1, window + 0.5)  # the load outlasts the recording
        _, err = await asyncio.wait_for(spy.communicate(), timeout=window + 30)
    finally:
        if spy.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                spy.kill()
            await spy.wait()
    if spy.returncode != 0 or not out.exists():
        why = err.decode("utf-8", "replace").strip().splitlines()
        return f"py-spy could not record ({why[-1][:200] if why else spy.returncode})"
    profile = parse_raw(out.read_text(encoding="utf-8", errors="replace"))
    out.unlink(missing_ok=True)
    return profile if profile.samples else "py-spy recorded no samples"
