"""The control room with many lanes: a refresh costs a fixed number of requests, and the
render log's project filter offers the chosen lane's projects only.

A coordinator of its own (not the session one of test_control_room_ui.py), seeded with
LANES lanes, each with two projects no other lane has.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page, Request, expect

from tests.ui.kit import (
    UI_READER,
    many_lane_name,
    many_lane_projects,
    seed_many_lanes,
    start_ui_coordinator,
)

LANES = 50
# Requests one refresh may make, whatever the number of lanes: GET /v1/overview (every
# lane at once) and GET /v1/evidence (the selected lane and ticket). The per-lane page made
# 3 per lane + 3 (153 with 50 lanes).
MAX_REQUESTS_PER_REFRESH = 2
REFRESH_MARK = "/v1/overview"  # the first request of every refresh


@pytest.fixture(scope="module")
def many_lanes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    proc = start_ui_coordinator(tmp_path_factory.mktemp("many-lanes"))
    try:
        seed_many_lanes(proc.url, proc.token, LANES)  # as the admin
        yield proc.url, UI_READER.token  # the page only reads
    finally:
        proc.stop()


def unlock(page: Page, base: str, token: str) -> None:
    page.goto(base + "/control-room")
    page.fill("#token", token)
    page.click("#unlock")
    expect(page.locator("#live")).to_have_class(re.compile(r"live-ok"), timeout=30_000)
    expect(page.locator(".lane-card")).to_have_count(LANES)


def refreshes(requests: list[Request]) -> list[list[str]]:
    """The page's /v1 requests cut into refreshes, each starting at its overview read; the
    last one may still be under way and is dropped."""
    cycles: list[list[str]] = []
    for r in requests:
        path = urlsplit(r.url).path
        if not path.startswith("/v1/"):
            continue
        if path == REFRESH_MARK:
            cycles.append([])
        if cycles:  # requests before the first overview (e.g. the token check) are not counted
            cycles[-1].append(f"{r.method} {path}")
    return cycles[:-1]


def test_requests_per_refresh_do_not_grow_with_the_lanes(
    page: Page, many_lanes: tuple[str, str]
) -> None:
    base, token = many_lanes
    requests: list[Request] = []
    page.on("request", lambda r: requests.append(r))
    unlock(page, base, token)
    # the page is whole: every lane's card, timeline, receipts; a holder and a waiter each
    first = many_lane_name(1)
    card = page.locator(f'.lane-card[data-lane="{first}"]')
    expect(card.locator("tr.held-row")).to_have_count(1)
    expect(card.locator("tr.queued-row")).to_have_count(1)
    expect(page.locator(".tl-lane")).to_have_count(LANES)
    expect(page.locator("#log tr.log-row")).to_have_count(25)  # 50 finished renders, 25 shown

    requests.clear()
    started = time.monotonic()
    # the selected lane's details (a lane's render log, one ticket's evidence) are in the
    # same fixed budget
    page.select_option("#log-lane", many_lane_name(7))
    expect(page.locator("#log tr.log-row")).to_have_count(1)
    card.locator("button.ticket").first.click()
    expect(page.locator('#evidence [data-evidence="job"]')).to_contain_text(
        many_lane_projects(1)[1]
    )
    page.wait_for_timeout(9_000)  # a few 2.5 s refresh cycles
    cycles = refreshes(requests)
    elapsed = time.monotonic() - started

    # whatever a refresh is made of: no more than the budget per 2.5 s period (+ the filter
    # change and the click, each of which refreshes at once)
    total = sum(1 for r in requests if urlsplit(r.url).path.startswith("/v1/"))
    assert total <= MAX_REQUESTS_PER_REFRESH * (elapsed / 2.5 + 3), (total, elapsed)
    # and refresh by refresh: one overview, then at most the selected ticket's evidence
    sizes = [len(c) for c in cycles]
    assert len(cycles) >= 3, (sizes, [r.url for r in requests][:10])
    assert max(sizes) <= MAX_REQUESTS_PER_REFRESH, (sizes, cycles)
    for c in cycles:
        assert c[0] == f"GET {REFRESH_MARK}" and set(c) <= {"GET /v1/overview", "GET /v1/evidence"}
    print(f"\n{LANES} lanes: {sizes} requests per refresh over {elapsed:.1f} s")


def project_options(page: Page) -> list[str]:
    values: Any = page.locator("#log-project option").evaluate_all("os => os.map(o => o.value)")
    return list(values)


def test_project_filter_lists_only_the_chosen_lanes_projects(
    page: Page, many_lanes: tuple[str, str]
) -> None:
    base, token = many_lanes
    unlock(page, base, token)
    everyone = {p for i in range(1, LANES + 1) for p in many_lane_projects(i)}
    assert len(everyone) == 2 * LANES  # no project is shared between lanes
    expect(page.locator("#log-project option")).to_have_count(1 + len(everyone))
    assert set(project_options(page)) == {"", *everyone}  # all lanes: every lane's projects

    lane1, lane2 = many_lane_name(1), many_lane_name(2)
    page.select_option("#log-lane", lane1)
    expect(page.locator("#log-project option")).to_have_count(3)
    assert project_options(page) == ["", *sorted(many_lane_projects(1))]
    rows = page.locator("#log tr.log-row")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(many_lane_projects(1)[0])

    # a project of lane 1 chosen, then lane 2: its filter offers lane 2's projects only and
    # the lane-1 project is dropped (the filter falls back to all of lane 2's projects)
    page.select_option("#log-project", many_lane_projects(1)[0])
    expect(rows).to_have_count(1)
    page.select_option("#log-lane", lane2)
    expect(page.locator("#log-project")).to_have_value("")
    assert project_options(page) == ["", *sorted(many_lane_projects(2))]
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(many_lane_projects(2)[0])
    expect(rows.first.locator("td[data-label=Lane]")).to_contain_text("acct-02")
    # still so after a few refreshes
    page.wait_for_timeout(3_000)
    assert project_options(page) == ["", *sorted(many_lane_projects(2))]
