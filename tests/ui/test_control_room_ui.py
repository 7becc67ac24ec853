"""The control room (docs/protocol.md#control-room-reads) in a real browser against a real
coordinator on loopback."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Request, expect

from coordinator.http.assets import CONTROL_ROOM_ASSETS
from tests.ui.kit import (
    MAIN,
    POOL,
    PROBE,
    SHORT,
    XSS_NOTE,
    XSS_PROJECT,
    XSS_SCENE,
    NoRedirect,
    Seeded,
)

TOKEN_KEY = "laneControlRoom.token"

# Everything the page may ever ask for: its own files (the style and the script's ES modules,
# the package's fixed asset list) and the read endpoints (GET only: /v1/lanes checks a pasted
# token, /v1/whoami names its credential once per unlock; each refresh is one /v1/overview and
# one /v1/evidence).
ALLOWED = {
    ("GET", "/control-room"),
    *(("GET", f"/control-room/assets/{name}") for name in CONTROL_ROOM_ASSETS),
    ("GET", "/v1/lanes"),
    ("GET", "/v1/whoami"),
    ("GET", "/v1/overview"),
    ("GET", "/v1/evidence"),
}


def lane_card(page: Page, lane: str) -> Any:
    return page.locator(f'.lane-card[data-lane="{lane}"]')


def unlock(page: Page, base: str, token: str) -> None:
    page.goto(base + "/control-room")
    page.fill("#token", token)
    page.click("#unlock")
    expect(page.locator("#dashboard")).to_be_visible()
    expect(page.locator("#live")).to_have_class(re.compile(r"live-ok"))
    expect(lane_card(page, MAIN)).to_be_visible()


def session_token(page: Page) -> Any:
    return page.evaluate(f"() => sessionStorage.getItem({json.dumps(TOKEN_KEY)})")


def console_errors(page: Page) -> list[str]:
    """The page's console errors and uncaught exceptions from now on (a module that failed
    to load, a CSP refusal, a script error)."""
    errors: list[str] = []

    def on_console(m: ConsoleMessage) -> None:
        if m.type == "error":
            errors.append(f"console: {m.text} ({m.location.get('url', '')})")

    page.on("console", on_console)
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    return errors


# ---------------------------------------------------------------- unlock / lock


def test_unlock_shows_holder_and_waiters(page: Page, coordinator: Seeded, artifacts: Path) -> None:
    errors = console_errors(page)
    page.goto(coordinator.base + "/control-room")
    expect(page.locator("#unlock-panel")).to_be_visible()
    expect(page.locator("#dashboard")).to_be_hidden()
    page.screenshot(path=str(artifacts / "locked.png"))

    unlock(page, coordinator.base, coordinator.token)
    assert session_token(page) == coordinator.token
    assert coordinator.token not in page.url

    card = lane_card(page, MAIN)
    held = card.locator(f'tr[data-ticket-row="{coordinator.main_held["ticketId"]}"]')
    expect(held).to_contain_text("studio-a")
    expect(held).to_contain_text("alpha-film")
    expect(held).to_contain_text("s05")
    expect(held.locator(".lease")).to_have_text(re.compile(r"^\d+:\d\d:\d\d$|^\d+:\d\d$"))
    expect(card.locator(".state-chip")).to_contain_text("busy 1/1")

    q1, q2 = coordinator.main_queued
    row1 = card.locator(f'tr[data-ticket-row="{q1["ticketId"]}"]')
    row2 = card.locator(f'tr[data-ticket-row="{q2["ticketId"]}"]')
    expect(row1).to_contain_text("#1")
    expect(row1).to_contain_text("studio-b")
    expect(row1).to_contain_text("beta-ad")
    expect(row1.locator("[data-eta]")).to_have_text(re.compile(r"≈ (\d+|now)"))
    expect(row2).to_contain_text("#2")
    expect(row2).to_contain_text("studio-c")
    expect(card).to_contain_text("Waiting (2)")
    page.wait_for_timeout(600)  # let fonts settle for the picture
    page.screenshot(path=str(artifacts / "desktop-full.png"), full_page=True)
    assert errors == []


def test_wrong_token_says_so(page: Page, coordinator: Seeded, artifacts: Path) -> None:
    page.goto(coordinator.base + "/control-room")
    page.fill("#token", "not-the-token-" + "x" * 40)
    page.click("#unlock")
    err = page.locator("#unlock-error")
    expect(err).to_be_visible()
    expect(err).to_contain_text("Wrong token")
    expect(err).to_contain_text("401")
    expect(page.locator("#dashboard")).to_be_hidden()
    assert session_token(page) is None
    page.screenshot(path=str(artifacts / "wrong-token.png"))


def test_lock_forgets_token_and_data(page: Page, coordinator: Seeded) -> None:
    v1: list[str] = []
    page.on("request", lambda r: v1.append(r.url) if "/v1/" in r.url else None)
    unlock(page, coordinator.base, coordinator.token)
    expect(page.locator("#log")).to_contain_text("studio-b")
    page.click("#lock")
    assert session_token(page) is None
    expect(page.locator("#dashboard")).to_be_hidden()
    expect(page.locator("#unlock-panel")).to_be_visible()
    for panel in ("#lanes", "#log", "#receipts", "#incidents", "#machines", "#evidence"):
        assert page.locator(panel).inner_html() == "", panel
    assert "studio-" not in page.locator("body").inner_text()
    # the refresh loop stopped with the lock: no more reads go out
    seen = len(v1)
    page.wait_for_timeout(6000)
    assert len(v1) == seen
    # and a reload stays locked (the token is really gone)
    page.reload()
    expect(page.locator("#unlock-panel")).to_be_visible()
    expect(page.locator("#dashboard")).to_be_hidden()


def test_token_survives_reload_in_the_same_tab(page: Page, coordinator: Seeded) -> None:
    unlock(page, coordinator.base, coordinator.token)
    page.reload()
    expect(page.locator("#dashboard")).to_be_visible()
    expect(lane_card(page, MAIN)).to_be_visible()


def test_a_token_no_longer_accepted_locks_the_page(page: Page, coordinator: Seeded) -> None:
    unlock(page, coordinator.base, coordinator.token)
    # as if the coordinator's token was rotated while the tab stayed open
    page.evaluate(
        f"() => sessionStorage.setItem({json.dumps(TOKEN_KEY)}, 'rotated-' + 'z'.repeat(40))"
    )
    page.reload()
    expect(page.locator("#unlock-error")).to_contain_text("no longer accepts this token")
    expect(page.locator("#dashboard")).to_be_hidden()
    assert session_token(page) is None
    assert page.locator("#lanes").inner_html() == ""


# ---------------------------------------------------------------- panels


def test_project_filter_narrows_the_render_log(page: Page, coordinator: Seeded) -> None:
    unlock(page, coordinator.base, coordinator.token)
    rows = page.locator("#log tr.log-row")
    expect(rows.first).to_be_visible()
    all_projects = set(rows.evaluate_all("rs => rs.map(r => r.dataset.project)"))
    assert {"alpha-film", "beta-ad"} <= all_projects

    page.select_option("#log-project", "beta-ad")
    expect(rows).to_have_count(coordinator.history_by_project["beta-ad"])
    assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.project)")) == {"beta-ad"}
    counts = page.locator("#log-counts")
    expect(counts.locator('[data-outcome="completed"] .count-n')).to_have_text("2")
    expect(counts.locator('[data-outcome="timeout"] .count-n')).to_have_text("1")
    expect(counts.locator('[data-outcome="slot-busy"] .count-n')).to_have_text("1")
    expect(counts.locator('[data-outcome="failed"]')).to_have_count(0)
    # the counts are the server's counts for that filter
    server = coordinator.api.post("history", {"lane": MAIN, "project": "beta-ad", "limit": 500})[
        "counts"
    ]
    assert server == {"completed": 2, "slot-busy": 1, "timeout": 1}
    # every outcome reads as a word, not only a colour
    for text in rows.locator("td[data-label=Outcome]").all_inner_texts():
        assert re.search(r"completed|timeout|slot busy", text), text

    page.select_option("#log-project", "alpha-film")
    expect(rows.first).to_be_visible()
    page.wait_for_function(
        "() => [...document.querySelectorAll('#log tr.log-row')]"
        ".every(r => r.dataset.project === 'alpha-film')"
    )
    page.select_option("#log-project", "")
    page.wait_for_function(
        "() => new Set([...document.querySelectorAll('#log tr.log-row')]"
        ".map(r => r.dataset.project)).size > 2"
    )


def test_hash_mismatch_stands_out(page: Page, coordinator: Seeded, artifacts: Path) -> None:
    unlock(page, coordinator.base, coordinator.token)
    bad = page.locator('#receipts tr.receipt-row[data-verified="false"]')
    expect(bad).to_have_count(1)
    expect(bad).to_have_class(re.compile(r"row-bad"))
    expect(bad).to_contain_text("HASH MISMATCH")
    expect(bad).to_contain_text("provider-submitted")
    expect(bad).to_contain_text("studio-b")
    expect(page.locator('#receipts tr.receipt-row[data-verified="true"]').first).to_contain_text(
        "✓ verified"
    )
    alert = page.locator('#alerts [data-alert="hash-mismatch"]')
    expect(alert).to_be_visible()
    expect(alert).to_contain_text("1 receipt failed the hash check")
    incident = page.locator('#incidents li[data-kind="receipt-hash-mismatch"]')
    expect(incident).to_have_count(1)
    expect(incident).to_contain_text("Receipt hash mismatch")
    page.locator("#receipts-title").scroll_into_view_if_needed()
    page.locator("#receipts").screenshot(path=str(artifacts / "receipts.png"))


def test_pause_banner_during_cooldown(page: Page, coordinator: Seeded) -> None:
    unlock(page, coordinator.base, coordinator.token)
    card = lane_card(page, POOL)
    banner = card.locator(".pause-banner")
    expect(banner).to_be_visible()
    text = banner.inner_text()
    m = re.search(r"paused — provider-human-check reported by studio-c, ends in (\d+):(\d\d)", text)
    assert m, text
    assert 20 <= int(m.group(1)) <= 29, text
    expect(card.locator(".state-chip")).to_contain_text("paused")
    expect(card).to_contain_text("studio-e")  # waits while the lane is paused
    expect(card).to_contain_text("nothing is promoted while the lane is paused")
    expect(page.locator('#alerts [data-alert="paused"]')).to_contain_text("studio-c")
    expect(page.locator('#incidents li[data-kind="provider-cooldown-started"]')).to_have_count(1)


def test_evidence_is_for_the_selected_ticket_only(page: Page, coordinator: Seeded) -> None:
    unlock(page, coordinator.base, coordinator.token)
    held_id = coordinator.main_held["ticketId"]
    lane_card(page, MAIN).locator(f'button.ticket[data-ticket="{held_id}"]').click()
    job = page.locator('#evidence [data-evidence="job"]')
    expect(job).to_contain_text(held_id)
    expect(job).to_contain_text("alpha-film")
    expect(job).to_contain_text("s05")
    expect(job.locator('[data-phase="lease-acquired"]')).to_have_class(re.compile("present"))
    expect(job.locator('[data-phase="references-applied"]')).to_have_class(re.compile("present"))
    for phase in ("provider-submitted", "provider-terminal"):
        row = job.locator(f'[data-phase="{phase}"]')
        expect(row).to_have_class(re.compile("missing"))
        expect(row).to_contain_text("unknown")
    expect(job.locator(".ev-complete")).to_contain_text("incomplete")

    coord = page.locator('#evidence [data-evidence="coordinator"]')
    distinct = int(coord.locator(".ev-distinct").inner_text())
    assert distinct >= 2
    expect(coord.locator(".ev-collision")).to_contain_text("studio-b")
    expect(coord.locator(".ev-collision")).to_contain_text("studio-a")

    # another ticket: its own receipts (one mismatched), nothing carried over
    bad_id = coordinator.mismatch_ticket["ticketId"]
    page.fill("#evidence-ticket", bad_id)
    page.press("#evidence-ticket", "Enter")
    expect(job).to_contain_text(bad_id)
    expect(job).to_contain_text("beta-ad")
    expect(job).not_to_contain_text("s05")
    expect(job.locator('[data-phase="references-applied"]')).to_contain_text("unknown")
    expect(job.locator('[data-phase="provider-submitted"]')).to_have_class(re.compile("row-bad"))
    expect(job.locator('[data-phase="provider-terminal"]')).to_have_class(re.compile("present"))

    # a ticket the lane never had: everything reads unknown, nothing is borrowed
    page.fill("#evidence-ticket", "t_never-issued-here")
    page.press("#evidence-ticket", "Enter")
    expect(job).to_contain_text("unknown")
    expect(job).not_to_contain_text("alpha-film")
    expect(job).not_to_contain_text("beta-ad")


def test_computers_and_incidents(page: Page, coordinator: Seeded) -> None:
    unlock(page, coordinator.base, coordinator.token)
    for m in ("studio-a", "studio-b", "studio-c", "studio-d", "studio-e"):
        row = page.locator(f'#machines tr[data-machine="{m}"]')
        expect(row).to_contain_text("online")
        expect(row).to_contain_text(re.compile(r"\d\d:\d\d:\d\d"))
    expect(page.locator('#machines tr[data-machine="studio-a"]')).to_contain_text(f"holds {MAIN}")
    # the 15 s lease nobody heartbeats is reaped by the alarm and shows up as an expiry
    expired = page.locator('#incidents li[data-kind="lease-expired"]')
    expect(expired).to_have_count(1, timeout=45_000)
    expect(expired).to_contain_text(SHORT)
    expect(page.locator("#log")).to_contain_text("expired", timeout=10_000)


def test_hostile_strings_stay_text(page: Page, coordinator: Seeded) -> None:
    unlock(page, coordinator.base, coordinator.token)
    log = page.locator("#log")
    expect(log).to_contain_text(XSS_PROJECT)
    expect(log).to_contain_text(XSS_SCENE)
    expect(log).to_contain_text(XSS_NOTE)
    assert page.locator("#dashboard img, #dashboard script, #dashboard b").count() == 0
    assert page.evaluate("() => window.__xss") is None


def test_timeline_draws_holders_and_pauses(page: Page, coordinator: Seeded) -> None:
    unlock(page, coordinator.base, coordinator.token)
    main = page.locator(f'.tl-lane[data-lane="{MAIN}"] svg')
    held_id = coordinator.main_held["ticketId"]
    expect(main.locator(f'rect.tl-bar[data-ticket="{held_id}"]')).to_have_attribute(
        "data-outcome", "holding"
    )
    pool = page.locator(f'.tl-lane[data-lane="{POOL}"]')
    expect(pool.locator("rect.tl-pause")).to_have_count(1)
    expect(pool.locator('[data-stat="paused"]')).to_be_visible()


# ---------------------------------------------------------------- live, network, layout


def test_live_refresh_and_unreachable(page: Page, coordinator: Seeded) -> None:
    unlock(page, coordinator.base, coordinator.token)
    t = coordinator.api.acquire(PROBE, "studio-f", "epsilon", "e01", lease=3600)["ticket"]
    card = lane_card(page, PROBE)
    expect(card).to_contain_text("studio-f", timeout=15_000)  # no reload: it refreshed itself

    page.route("**/v1/**", lambda route: route.abort())
    expect(page.locator("#live")).to_have_class(re.compile("live-down"), timeout=15_000)
    expect(page.locator("#live")).to_contain_text("unreachable")
    banner = page.locator("#connection-banner")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("Showing data from")
    expect(card).to_contain_text("studio-f")  # the last data stays, marked stale
    expect(page.locator("#dashboard")).to_have_class(re.compile("is-stale"))

    page.unroute("**/v1/**")
    expect(page.locator("#live")).to_have_class(re.compile("live-ok"), timeout=15_000)
    expect(banner).to_be_hidden()
    coordinator.api.release(PROBE, t, "completed")
    expect(card.locator(".state-chip")).to_contain_text("free slot", timeout=15_000)


def test_requests_stay_on_loopback_and_only_read(
    context: BrowserContext, coordinator: Seeded
) -> None:
    requests: list[Request] = []
    context.on("request", lambda r: requests.append(r))
    page = context.new_page()
    errors = console_errors(page)
    page.goto(coordinator.base + "/control-room")
    page.fill("#token", "wrong-" + "y" * 40)
    page.click("#unlock")
    expect(page.locator("#unlock-error")).to_be_visible()
    # the browser logs the refused token check itself; nothing else may be there
    assert all("status of 401" in e for e in errors), errors
    errors.clear()
    unlock(page, coordinator.base, coordinator.token)
    page.select_option("#log-project", "alpha-film")
    lane_card(page, MAIN).locator("button.ticket").first.click()
    expect(page.locator('#evidence [data-evidence="job"]')).to_contain_text("alpha-film")
    page.click('#timeline-window button[data-window="1800"]')
    # several refresh cycles
    page.wait_for_function(
        "() => performance.getEntriesByType('resource')"
        ".filter(e => new URL(e.name).pathname === '/v1/overview').length >= 4",
        timeout=30_000,
    )
    page.click("#lock")
    assert errors == []

    assert len(requests) > 10
    origin = urlsplit(coordinator.base)
    seen: set[tuple[str, str]] = set()
    for r in requests:
        u = urlsplit(r.url)
        assert (u.scheme, u.hostname, u.port) == ("http", "127.0.0.1", origin.port), r.url
        assert coordinator.token not in r.url
        key = (r.method, u.path)
        assert key in ALLOWED, key
        seen.add(key)
        if u.path.startswith("/v1/"):
            assert r.headers.get("authorization", "").startswith("Bearer "), r.url
        assert r.post_data is None, r.url  # no body: nothing is sent, not even a machineId
    assert {("GET", "/v1/lanes"), ("GET", "/v1/overview"), ("GET", "/v1/evidence")} <= seen


def test_phone_width_has_no_horizontal_overflow(
    browser: Browser, coordinator: Seeded, artifacts: Path
) -> None:
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="light")
    try:
        page = ctx.new_page()
        page.goto(coordinator.base + "/control-room")
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
        page.screenshot(path=str(artifacts / "phone-locked.png"))
        unlock(page, coordinator.base, coordinator.token)
        expect(page.locator("#log tr.log-row").first).to_be_visible()
        expect(page.locator(".tl-lane svg").first).to_be_visible()
        # the evidence of a ticket with receipts missing (the longest texts on the page)
        lane_card(page, MAIN).locator("button.ticket").first.click()
        expect(page.locator('#evidence [data-evidence="job"]')).to_contain_text("incomplete")
        page.wait_for_timeout(600)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, width
        wide = page.evaluate(
            "() => [...document.querySelectorAll('#dashboard *')]"
            ".filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)"
            ".map(e => e.tagName + '.' + e.className).slice(0, 5)"
        )
        assert wide == [], wide
        page.screenshot(path=str(artifacts / "phone-full.png"), full_page=True)
    finally:
        ctx.close()


def test_timeline_over_hours(
    browser: Browser, timeline_demo: tuple[str, str], artifacts: Path
) -> None:
    base, token = timeline_demo
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    try:
        page = ctx.new_page()
        page.goto(base + "/control-room")
        page.fill("#token", token)
        page.click("#unlock")
        lane = page.locator('.tl-lane[data-lane="seedance-direct:main-unlimited"]')
        expect(lane.locator("svg")).to_be_visible()
        # holds inside the 3 h window: b (clipped), c, d, e (expired), f, g, h, and the holder
        bars = lane.locator("rect.tl-bar")
        expect(bars).to_have_count(8)
        outcomes = bars.evaluate_all("rs => rs.map(r => r.dataset.outcome)")
        assert outcomes.count("expired") == 1 and outcomes.count("holding") == 1, outcomes
        gaps = sorted(
            round(int(x) / 60)
            for x in lane.locator("rect.tl-idle").evaluate_all(
                "rs => rs.map(r => r.dataset.idleSeconds)"
            )
        )
        assert gaps == [2, 3, 4, 5, 9, 18, 35], gaps
        expect(lane.locator('[data-stat="longest-gap"]')).to_contain_text("35 min")
        expect(lane.locator('[data-stat="idle"]')).to_contain_text("1 h 16 min")
        expect(lane.locator('[data-stat="paused"]')).to_contain_text("20 min")
        m = re.search(r"(\d+)%", lane.locator('[data-stat="busy"]').inner_text())
        assert m, "no busy percentage"
        busy = int(m[1])
        assert 57 <= busy <= 59, busy
        expect(lane.locator("rect.tl-pause")).to_have_count(1)
        pool = page.locator('.tl-lane[data-lane="kling:team"]')
        expect(pool.locator("rect.tl-bar")).to_have_count(6)
        page.wait_for_timeout(600)
        page.locator("#timeline-title").scroll_into_view_if_needed()
        page.locator("section:has(#timeline)").screenshot(path=str(artifacts / "timeline.png"))
        page.screenshot(path=str(artifacts / "demo-desktop-full.png"), full_page=True)
        ctx2 = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark")
        try:
            phone = ctx2.new_page()
            phone.goto(base + "/control-room")
            phone.fill("#token", token)
            phone.click("#unlock")
            expect(phone.locator(".tl-lane svg").first).to_be_visible()
            phone.wait_for_timeout(600)
            assert phone.evaluate("() => document.documentElement.scrollWidth") <= 390
            phone.screenshot(path=str(artifacts / "demo-phone-dark.png"), full_page=True)
        finally:
            ctx2.close()
    finally:
        ctx.close()


# ---------------------------------------------------------------- the routes themselves


def test_dashboard_redirects_and_assets_are_served(coordinator: Seeded) -> None:
    opener = urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(
        coordinator.base + "/v1/dashboard",
        headers={"Authorization": f"Bearer {coordinator.token}"},
    )
    try:
        opener.open(req, timeout=10)
        raise AssertionError("expected a 302")
    except urllib.error.HTTPError as e:
        assert e.code == 302
        assert e.headers["Location"].endswith("/control-room")

    with urllib.request.urlopen(coordinator.base + "/control-room", timeout=10) as r:
        csp = r.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "connect-src 'self'" in csp
        html = r.read().decode()
    # nothing on the page comes from anywhere else
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    # the page loads its script as an ES module (the entry imports the rest, see
    # tests/integration/test_control_room_assets.py)
    assert '<script type="module" src="/control-room/assets/control-room.js">' in html
    assert "script-src 'self'" in csp
    for name, ctype in CONTROL_ROOM_ASSETS.items():
        with urllib.request.urlopen(f"{coordinator.base}/control-room/assets/{name}") as r:
            assert r.headers["Content-Type"].startswith(ctype)
            body = r.read().decode()
            # no URL but the SVG namespace name; no HTML parsing of anything
            assert re.findall(r"https?://[^\s'\"]+", body) in ([], ["http://www.w3.org/2000/svg"])
            assert not re.search(r"\.innerHTML|outerHTML|insertAdjacentHTML|document\.write", body)
    try:
        urllib.request.urlopen(coordinator.base + "/control-room/assets/..%2Fapp.py", timeout=10)
        raise AssertionError("expected a 404")
    except urllib.error.HTTPError as e:
        assert e.code == 404
    # the page itself holds no data: nothing seeded appears in it
    assert "studio-" not in html
