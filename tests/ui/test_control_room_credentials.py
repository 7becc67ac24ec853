"""The control room and credentials (docs/operator.md#credentials) in a real browser: unlocked
with a reader credential it reads everything and warns of nothing; unlocked with one that can
write (a driver, an admin) it says so plainly, and Lock forgets it; each row names the
credential that wrote it (render log, receipts, incidents), a hand release by whom."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.ui.kit import MAIN, UI_ADMIN, UI_DRIVER, UI_READER, Api, Seeded

CREDS_LANE = "probe:creds"  # capacity 1 (route probe), used by this module only


def unlock(page: Page, base: str, token: str) -> None:
    page.goto(base + "/control-room")
    page.fill("#token", token)
    page.click("#unlock")
    expect(page.locator("#dashboard")).to_be_visible()
    expect(page.locator("#live")).to_have_class(re.compile(r"live-ok"))


def test_a_reader_credential_reads_everything_without_a_warning(
    page: Page, coordinator: Seeded
) -> None:
    unlock(page, coordinator.base, UI_READER.token)
    expect(page.locator("#credential-name")).to_have_text("credential: control-room (reader)")
    expect(page.locator(f'.lane-card[data-lane="{MAIN}"]')).to_be_visible()
    expect(page.locator("#log .log-row").first).to_be_visible()
    expect(page.locator("#receipts .receipt-row").first).to_be_visible()
    expect(page.locator("#incidents li").first).to_be_visible()
    expect(page.locator("#machines tr[data-machine]").first).to_be_visible()
    page.wait_for_timeout(500)  # a refresh later: still no warning
    expect(page.locator("#credential-banner")).to_be_hidden()


def test_a_credential_that_can_write_is_said_plainly(page: Page, coordinator: Seeded) -> None:
    unlock(page, coordinator.base, UI_DRIVER.token)
    banner = page.locator("#credential-banner")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("unlocked with a credential that can write")
    expect(banner).to_contain_text("“studio-a” is a driver credential")
    expect(banner).to_contain_text("as studio-a")
    expect(banner).to_contain_text("lane-coordinator token add control-room --role reader")
    expect(page.locator("#credential-name")).to_have_text("credential: studio-a (driver)")
    expect(page.locator("#credential-name")).to_have_attribute("data-role", "driver")
    # Lock forgets it; a reader unlocking the same tab sees no warning
    page.click("#lock")
    expect(banner).to_be_hidden()
    expect(page.locator("#credential-name")).to_have_text("")
    page.fill("#token", UI_READER.token)
    page.click("#unlock")
    expect(page.locator("#credential-name")).to_have_text("credential: control-room (reader)")
    expect(banner).to_be_hidden()


def test_an_admin_credential_warns_it_acts_for_any_machine(page: Page, coordinator: Seeded) -> None:
    unlock(page, coordinator.base, UI_ADMIN.token)
    banner = page.locator("#credential-banner")
    expect(banner).to_contain_text("“ops” is an admin credential")
    expect(banner).to_contain_text("change any lane, as any machine")
    page.reload()  # the same tab, the saved token: asked again, said again
    expect(banner).to_contain_text("“ops” is an admin credential")


def test_rows_name_the_credential_that_wrote_them(page: Page, coordinator: Seeded) -> None:
    driver = Api(coordinator.base, UI_DRIVER.token)
    mine = driver.acquire(CREDS_LANE, "studio-a", "cred-film", "c01")["ticket"]
    driver.receipt(CREDS_LANE, mine, "lease-acquired", {"refs": 1})
    # another claim asking for the same render: a collision incident, the driver's
    driver.acquire(CREDS_LANE, "studio-a", "cred-film", "c01", claim="a-second-driver")
    waiting = driver.acquire(CREDS_LANE, "studio-a", "cred-film", "c02")["ticket"]
    driver.release(CREDS_LANE, mine, "completed")
    # the operator releases the driver's other ticket by hand (no claim, no outcome)
    coordinator.api.post(
        "release", {"lane": CREDS_LANE, "machineId": "studio-a", "ticketId": waiting["ticketId"]}
    )
    unlock(page, coordinator.base, UI_READER.token)
    page.select_option("#log-lane", CREDS_LANE)
    log = page.locator("#log")
    done = log.locator(".log-row", has_text="c01")
    expect(done.locator('[data-credential="studio-a"]')).to_have_text("via studio-a")
    hand = log.locator(".log-row", has_text="c02")
    expect(hand).to_contain_text("via studio-a")
    expect(hand.locator('[data-credential="ops"]')).to_have_text("released by ops")
    receipt = page.locator("#receipts .receipt-row", has_text=mine["ticketId"][:8])
    expect(receipt.locator(".cred")).to_have_text("via studio-a")
    collision = page.locator('#incidents li[data-kind="duplicate-collision"]', has_text="creds")
    expect(collision.first.locator(".cred")).to_have_text("via studio-a")
