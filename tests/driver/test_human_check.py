"""Provider human check (docs/protocol.md#driver-rules, docs/protocol.md#cooldown): cooldown on the
held ticket, release not-submitted, the lane paused for every computer; a 404 from an old
coordinator is a warning."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from client.api import LaneClient
from client.config import load_settings
from client.driver import ProviderHumanCheck, Turn, TurnNotHeld, human_check_cooldown_seconds
from client.driver.journal import Journal
from tests.harness import ThreadedCoordinator

from .kit import LANE

H = "sha256:" + "ef" * 32
Clients = Callable[..., LaneClient]


async def test_human_check_pauses_the_lane_for_everyone_and_releases_not_submitted(
    coord: ThreadedCoordinator,
    clients: Clients,
    journal: Journal,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LANE_HUMAN_CHECK_COOLDOWN_SECONDS", "5")  # clamped up to 30
    a, b = clients("studio-a", "claim-a"), clients("studio-b", "claim-b")
    async with Turn(a, LANE, "proj", "scene-1", H, journal=journal) as turn:
        reply = await turn.human_check()
        assert reply is not None and reply.paused and reply.pause is not None
        assert reply.pause.until - reply.pause.started_at == pytest.approx(30)
        assert (reply.pause.machine_id, reply.pause.ticket_id) == ("studio-a", turn.ticket_id)
        assert turn.released and turn.human_checked
        with pytest.raises(TurnNotHeld):
            turn.check()
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "paused lane" in ln]
    assert lines == [
        f"lane: this machine (studio-a) paused lane {LANE} for 30 s (provider human check on "
        f"ticket {turn.ticket_id}); every computer waits until it ends"
    ]
    hist = await a.history(LANE)
    assert [(e.ticket_id, e.outcome) for e in hist.entries] == [(turn.ticket_id, "not-submitted")]
    rec = journal.get(turn.window)
    assert rec is not None and (rec.phase, rec.outcome) == ("terminal", "not-submitted")

    # another computer now queues behind the pause, though the slot is free
    r = await b.acquire(LANE, "proj", "scene-2", H)
    assert r.ticket.state == "queued" and not r.granted
    assert r.pause is not None and r.pause.machine_id == "studio-a"
    assert r.pause.reason_code == "provider-human-check"
    st = await b.status(LANE)
    assert st.pause is not None and st.held == []
    waiting = asyncio.create_task(b.await_ticket(LANE, r.ticket_id, 60))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    coord.advance(31)  # the pause ends: the alarm promotes b
    granted = await asyncio.wait_for(waiting, 30)
    assert granted.granted and granted.ticket.state == "held"
    await b.release(LANE, r.ticket_id, "completed")


async def test_a_human_check_raised_by_the_submit_is_handled_on_exit(
    clients: Clients, journal: Journal
) -> None:
    a = clients()

    async def submit() -> str:
        raise ProviderHumanCheck("Turnstile on submit")

    turn = Turn(a, LANE, "proj", "scene-1", H, journal=journal, cooldown_seconds=120)
    with pytest.raises(ProviderHumanCheck):
        async with turn:
            await turn.submit(submit)
    assert turn.human_checked and turn.cooldown_reply is not None
    assert turn.cooldown_reply.pause is not None
    pause = turn.cooldown_reply.pause
    assert pause.until - pause.started_at == pytest.approx(120)
    assert (await a.history(LANE)).entries[0].outcome == "not-submitted"
    rec = journal.get(turn.window)
    # the provider certainly did not accept the job: nothing to reconcile
    assert rec is not None and (rec.phase, rec.outcome) == ("terminal", "not-submitted")
    assert not rec.unfinished


@pytest.mark.parametrize("required", [False, True])
@pytest.mark.parametrize("fault", ["404-text", "404-json"])
async def test_cooldown_404_from_an_old_coordinator_is_a_warning(
    coord: ThreadedCoordinator,
    clients: Clients,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    fault: str,
    required: bool,
) -> None:
    coord.faults["/v1/lanes/cooldown"] = fault  # this coordinator predates the endpoint
    a = clients("studio-a", "claim-a", required=required)
    caplog.set_level(logging.WARNING, logger="lane.driver")
    async with Turn(a, LANE, "proj", "scene-1", H) as turn:
        reply = await turn.human_check()
    assert reply is None and turn.human_checked and turn.released
    assert coord.hits.get("/v1/lanes/cooldown") == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("404" in w and "too old" in w for w in warnings), warnings
    assert "paused lane" not in capsys.readouterr().err  # it paused nothing
    assert (await a.history(LANE)).entries[0].outcome == "not-submitted"
    assert (await a.status(LANE)).pause is None


def test_cooldown_seconds_from_settings_and_environment() -> None:
    assert human_check_cooldown_seconds(environ={}) == 900
    assert human_check_cooldown_seconds(environ={"LANE_HUMAN_CHECK_COOLDOWN_SECONDS": "1"}) == 30
    env = {"LANE_HUMAN_CHECK_COOLDOWN_SECONDS": "99999"}
    assert human_check_cooldown_seconds(environ=env) == 7200
    env = {"LANE_HUMAN_CHECK_COOLDOWN_SECONDS": "soon"}
    assert human_check_cooldown_seconds(environ=env) == 900
    s = load_settings(
        environ={"LANE_HUMAN_CHECK_COOLDOWN_SECONDS": "600", "LANE_CONFIG_DIR": "/nonexistent"},
        use_keyring=False,
        mint_claim=False,
    )
    assert human_check_cooldown_seconds(s) == 600
