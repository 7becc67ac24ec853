"""Helpers for the driver tests: lane names, a fake provider, a recording backend wrapper and
a real-time poll. The coordinator itself comes from tests/harness (`ThreadedCoordinator`, fixture
`coord` in tests/driver/conftest.py: ManualClock, fault layer, `advance(s)`)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from tests.harness import REPO as REPO  # re-exported for the tests

PY = sys.executable

LANE = "drill:example"
OTHER_LANE = "render:main"
FREE_LANE = "free:main"  # route without a capacity: unenforced


def last_json(stdout: str) -> dict[str, Any]:
    line = [ln for ln in stdout.splitlines() if ln.startswith("{")][-1]
    out: dict[str, Any] = json.loads(line)
    return out


async def wait_until(pred: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
    """Poll `pred` (real time, generous bound: the machine is shared)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what or pred}")
        await asyncio.sleep(0.01)


class FakeProvider:
    """An in-memory provider for library tests: counts submits and polls."""

    def __init__(self, status: str = "completed") -> None:
        self.status = status
        self.submits: list[str] = []
        self.polls: list[str] = []
        self.finds = 0

    async def submit(self) -> str:
        job = f"job-{len(self.submits) + 1}"
        self.submits.append(job)
        return job

    async def poll(self, job_id: str) -> str:
        self.polls.append(job_id)
        return self.status

    def submit_sync(self) -> str:
        job = f"job-{len(self.submits) + 1}"
        self.submits.append(job)
        return job

    def poll_sync(self, job_id: str) -> str:
        self.polls.append(job_id)
        return self.status


class Recording:
    """A LaneBackend wrapper (every call goes to the real backend) that records heartbeat
    answers, and can send receipts elsewhere (`receipts_to`)."""

    def __init__(self, inner: Any, receipts_to: Any = None, log: list[Any] | None = None) -> None:
        self.inner = inner
        self.receipts_to = receipts_to
        self.heartbeats: list[Any] = [] if log is None else log

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def kind(self) -> str:
        return str(self.inner.kind)

    @property
    def machine_id(self) -> str:
        return str(self.inner.machine_id)

    @property
    def claim_id(self) -> str | None:
        return self.inner.claim_id  # type: ignore[no-any-return]

    async def heartbeat(self, *a: Any, **k: Any) -> Any:
        try:
            r = await self.inner.heartbeat(*a, **k)
        except Exception as exc:
            self.heartbeats.append(exc)
            raise
        self.heartbeats.append(r)
        return r

    async def receipt(self, *a: Any, **k: Any) -> Any:
        target = self.receipts_to if self.receipts_to is not None else self.inner
        return await target.receipt(*a, **k)

    def with_claim(self, claim: str | None) -> Recording:
        return Recording(self.inner.with_claim(claim), self.receipts_to, self.heartbeats)

    def refusals(self) -> list[str | None]:
        return [h.reason for h in self.heartbeats if hasattr(h, "refreshed") and not h.refreshed]
