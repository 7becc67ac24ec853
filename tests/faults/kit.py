"""What the fault tests share: run length (short or full), seeds, and the judgements every
row makes (the checker clean, no client problem, no traceback in any server log)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from typing import Any, TypeVar

import aiohttp

from tests.harness import CoordinatorProcess
from tests.harness.history import Report
from tests.harness.load import Load

T = TypeVar("T")

FULL = os.environ.get("FAULTS_FULL", "") not in ("", "0")


def pick(short: T, full: T) -> T:
    """The short run's value (`make test`), or the full run's (FAULTS_FULL=1)."""
    return full if FULL else short


def seed() -> int:
    """FAULTS_SEED=<n> replays a run's random choices (printed in its note)."""
    return int(os.environ.get("FAULTS_SEED", random.randrange(2**31)))


def logs(servers: Iterable[CoordinatorProcess], tail: int = 40) -> str:
    return "\n".join(
        f"--- {s.url} (exit {s.proc.poll()}) ---\n" + "\n".join(s.lines[-tail:]) for s in servers
    )


def assert_no_traceback(servers: Iterable[CoordinatorProcess]) -> None:
    for s in servers:
        text = s.text
        assert "Traceback" not in text and 'File "' not in text, (
            f"a traceback in the log of {s.url}:\n{text[-4000:]}"
        )


def assert_clean(report: Report, load: Load, servers: Iterable[CoordinatorProcess]) -> None:
    """Nothing acknowledged lost, no violation, no client problem."""
    servers = list(servers)
    problems = load.problems
    if not report.ok or problems:
        raise AssertionError(
            f"{report.summary('fault')}\n{report.explain()}\nclient problems: "
            f"{problems[:10]}\n{logs(servers)}"
        )


async def readyz(url: str) -> tuple[int | None, Any]:
    """GET /readyz: (status, body); (None, error name) when nothing answered."""
    try:
        async with (
            aiohttp.ClientSession() as s,
            s.get(f"{url}/readyz", timeout=aiohttp.ClientTimeout(total=5)) as r,
        ):
            return r.status, await r.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        return None, type(exc).__name__
