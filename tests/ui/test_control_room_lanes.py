"""The control room's lane cards (coordinator/http/static/lanes.js) in a real browser against a
real coordinator: an in-flight provider job shows on its lane as "provider job may still run —
until <time>" and takes its slot, and each lane shows how far its ETAs were off
(docs/protocol.md#eta-error) beside its queue. The coordinator runs on a loop thread with a
ManualClock, so the seeded waits, and the ETA error they make, are exact."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from coordinator.clock import ManualClock
from coordinator.config import Config
from tests.harness import ThreadedCoordinator
from tests.ui.kit import Api

HOLDING = "runway:gen"  # capacity 1: a grant at once, one after a 90 s wait, an in-flight job
IDLE = "luma:idle"  # capacity 1 by lane: no file, no grant yet


@dataclass
class Lanes:
    base: str
    token: str
    in_flight: dict[str, Any]  # the ticket whose provider job may still run
    waiting: dict[str, Any]  # queued behind it
    hold_until: float


@pytest.fixture(scope="module")
def lanes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lanes]:
    t0 = time.time() - 600  # the hold (submit + 1800 s) ends 20 min from now
    clock = ManualClock(start=t0)
    config = Config(waiter_timeout_seconds=7200, routes={"runway": 1}, lanes={IDLE: 1})
    data = tmp_path_factory.mktemp("lanes") / "data"
    coord = ThreadedCoordinator(data, config=config, clock=clock)
    try:
        api = Api(coord.url, coord.token)

        def at(offset: float) -> None:
            async def move() -> None:  # on the loop, where the clock's sleepers live
                clock.set(t0 + offset)

            coord.call(move)

        a = api.acquire(HOLDING, "studio-a", "alpha-film", "s01", lease=3600)["ticket"]
        at(10)
        b = api.acquire(HOLDING, "studio-b", "beta-ad", "s01", lease=3600)["ticket"]
        assert b["etaSeconds"] == 290.0  # the default 300 s hold, 10 s of it gone
        at(100)
        assert api.release(HOLDING, a, "completed")["promoted"] == [b["ticketId"]]  # waited 90 s
        at(110)
        api.receipt(HOLDING, b, "provider-submitted", {"job": "gen-7"})
        at(120)
        assert api.release(HOLDING, b, "lease-lost")["promoted"] == []  # the job may still run
        at(130)
        c = api.acquire(HOLDING, "studio-c", "alpha-film", "s02")["ticket"]
        assert c["state"] == "queued"
        st = api.post("status", {"lane": HOLDING})
        assert st["etaError"] == {"grants": 2, "medianSeconds": 0.0, "p90Seconds": 200.0}
        [job] = st["inFlight"]
        yield Lanes(coord.url, coord.token, b, c, job["holdUntil"])
    finally:
        coord.stop()


def _card(page: Page, lanes: Lanes, lane: str) -> Any:
    page.goto(lanes.base + "/control-room")
    page.fill("#token", lanes.token)
    page.click("#unlock")
    card = page.locator(f'.lane-card[data-lane="{lane}"]')
    expect(card).to_be_visible()
    return card


def test_an_in_flight_job_shows_on_its_lane_and_takes_its_slot(
    page: Page, lanes: Lanes, artifacts: Path
) -> None:
    card = _card(page, lanes, HOLDING)
    job = card.locator(f'tr.in-flight-row[data-ticket-row="{lanes.in_flight["ticketId"]}"]')
    expect(job).to_contain_text("studio-b")
    expect(job).to_contain_text("beta-ad")
    expect(job.locator(".in-flight-note")).to_have_text(
        re.compile(r"^provider job may still run — until (\w+ \d+ )?\d\d:\d\d:\d\d$")
    )
    shown = page.evaluate(
        "(t) => { const d = new Date(t * 1000); const p = (n) => String(n).padStart(2, '0');"
        " return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`; }",
        lanes.hold_until,
    )
    expect(job.locator(".in-flight-note")).to_contain_text(f"until {shown}")
    # the job's slot is taken: no free slot, the lane is busy, the waiter still waits
    expect(card.locator(".state-chip")).to_contain_text("busy 1/1")
    expect(card.locator("tr.free-row")).to_have_count(0)
    expect(card).to_contain_text("Holding (1 of 1) — 1 in-flight provider job")
    expect(card.locator(f'tr[data-ticket-row="{lanes.waiting["ticketId"]}"]')).to_contain_text("#1")
    page.screenshot(path=str(artifacts / "lane-in-flight.png"))


def test_a_lane_with_grants_shows_its_eta_error_beside_the_queue(page: Page, lanes: Lanes) -> None:
    card = _card(page, lanes, HOLDING)
    note = card.locator(".eta-error")
    # the grant at once (0 s off) and the one told 290 s that waited 90 s (200 s off)
    expect(note).to_have_text("ETA ±0 s (p90 3 min 20 s, 2 grants)")
    assert "nine in ten within 3 min 20 s" in (note.get_attribute("title") or "")
    idle = page.locator(f'.lane-card[data-lane="{IDLE}"]')
    expect(idle.locator(".eta-error")).to_have_text("ETA error: no grants yet")
