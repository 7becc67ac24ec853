"""What a lane actor says about a durable group (coordinator/actor/commit_log.py): the
metrics observer hears the group and the lane's state (a failing observer never fails the
reply), and the log has one line per ticket (its last write), pause, receipt and incident."""

from __future__ import annotations

from typing import Any, cast

import pytest
import structlog

from coordinator.actor.base import LaneActor
from coordinator.actor.commit_log import log_group, report_group
from coordinator.clock import ManualClock
from coordinator.engine.model import (
    Effects,
    Incident,
    Pause,
    PutCounters,
    PutIncident,
    PutPause,
    PutReceipt,
    PutTicket,
    Receipt,
)
from coordinator.metrics import NullMetrics
from tests.unit.kit import LANE, T0, Harness


class Metrics(NullMetrics):
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[Any, ...]] = []

    def committed(self, lane: str, fx: Effects, operations: int, seconds: float) -> None:
        self.calls.append(("committed", lane, fx, operations, seconds))
        if self.fail:
            raise ValueError("observer broke")

    def lane_state(
        self, lane: str, held: int, queued: int, paused: bool, in_flight: int = 0
    ) -> None:
        self.calls.append(("lane_state", lane, held, queued, paused))
        if self.fail:
            raise ValueError("observer broke")


class Actor:
    """What report_group reads of an actor."""

    def __init__(self, metrics: Metrics, h: Harness | None) -> None:
        self.lane = LANE
        self.metrics = metrics
        self.core = None if h is None else h.core
        self.clock = ManualClock(T0)


def actor(metrics: Metrics, h: Harness | None) -> LaneActor[Any]:
    return cast(LaneActor[Any], Actor(metrics, h))


def test_the_observer_hears_the_group_and_the_lanes_state() -> None:
    h = Harness(capacity=1)
    h.acquire("a")
    h.acquire("b")
    fx, metrics = Effects(), Metrics()
    report_group(actor(metrics, h), fx, 2, 0.5)
    assert metrics.calls == [
        ("committed", LANE, fx, 2, 0.5),
        ("lane_state", LANE, 1, 1, False),
    ]
    metrics.calls.clear()
    report_group(actor(metrics, None), fx, 1, 0.1)  # no core: no lane state
    assert [c[0] for c in metrics.calls] == ["committed"]


def test_a_failing_observer_is_logged_never_raised() -> None:
    h = Harness(capacity=1)
    metrics = Metrics(fail=True)
    with structlog.testing.capture_logs() as logs:
        report_group(actor(metrics, h), Effects(), 1, 0.1)
    assert [c[0] for c in metrics.calls] == ["committed", "lane_state"]
    failed = [e for e in logs if e["event"] == "lane.metrics_failed"]
    assert [e["error"] for e in failed] == ["ValueError", "ValueError"]


def test_one_line_per_ticket_its_last_write_and_one_per_pause_receipt_incident(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(capacity=1)
    tid = h.tid("a")
    held = h.t(tid)
    h.release(tid)
    ended = h.t(tid)
    pause = Pause("provider-human-check", T0, T0 + 60, "mA", "cA", tid)
    rec = Receipt("r1", tid, "lease-acquired", "mA", "{}", "sha256:x", False, T0)
    inc = Incident("lease-expired", T0, tid, "mA", {})
    fx = Effects(
        [
            PutTicket(held),
            PutCounters(1, 2),
            PutPause(pause),
            PutReceipt(rec),
            PutTicket(ended),
            PutIncident(inc),
            PutPause(None),
        ]
    )
    monkeypatch.setattr("coordinator.actor.commit_log.enabled", lambda _level: True)
    with structlog.testing.capture_logs() as logs:
        log_group(LANE, fx)
    assert [e["event"] for e in logs] == [
        "lane.pause",
        "lane.receipt",
        "lane.ticket",
        "lane.incident",
        "lane.pause",
    ]
    ticket = logs[2]
    assert (ticket["ticket"], ticket["state"], ticket["outcome"]) == (tid, "done", "completed")
    assert logs[0]["until"] == T0 + 60 and logs[4]["until"] is None
    assert logs[1]["verified"] is False and logs[3]["kind"] == "lease-expired"


def test_nothing_is_logged_below_info(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(capacity=1)
    h.acquire("a")
    monkeypatch.setattr("coordinator.actor.commit_log.enabled", lambda _level: False)
    with structlog.testing.capture_logs() as logs:
        log_group(LANE, Effects(list(h.changes)))
    assert logs == []
