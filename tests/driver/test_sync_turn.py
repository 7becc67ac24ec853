"""SyncTurn: the same turn for plain-Python drivers, on the sync facade."""

from __future__ import annotations

import dataclasses
import inspect
import io
import time
from collections.abc import Callable, Iterator

import pytest

from client.config import load_settings
from client.driver import LeaseLost, ProviderHumanCheck, ReconcileRequired, SyncTurn, Turn
from client.driver.journal import Journal
from client.sync import SyncLaneClient
from tests.harness import ThreadedCoordinator

from .kit import LANE, FakeProvider

H = "sha256:" + "99" * 32


@pytest.fixture
def sync_clients(coord: ThreadedCoordinator) -> Iterator[Callable[..., SyncLaneClient]]:
    made: list[SyncLaneClient] = []

    def make(machine: str = "studio-a", claim: str | None = "claim-a") -> SyncLaneClient:
        c = SyncLaneClient.wrap(coord.client(machine, claim))
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def wait_for(pred: Callable[[], bool], timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_sync_turn_happy_path(
    sync_clients: Callable[..., SyncLaneClient], journal: Journal
) -> None:
    lane = sync_clients()
    provider = FakeProvider()
    with SyncTurn(lane, LANE, "proj", "scene-1", H, journal=journal) as turn:
        assert turn.fence == 1
        turn.references_applied(["sha256:" + "0" * 64])
        status = turn.run(submit=provider.submit_sync, poll=provider.poll_sync)
    assert status == "completed" and provider.submits == ["job-1"]
    e = lane.history(LANE).entries[0]
    assert (e.ticket_id, e.outcome, e.provider_job_id) == (turn.ticket_id, "completed", "job-1")
    st = lane.status(LANE, include_receipts=True)
    assert st.recent_receipts is not None and len(st.recent_receipts) == 4
    assert all(r.content_hash_verified for r in st.recent_receipts)


def test_sync_turn_exception_is_failed_and_submit_raise_keeps_ticket(
    sync_clients: Callable[..., SyncLaneClient], journal: Journal
) -> None:
    lane = sync_clients()
    with pytest.raises(KeyError), SyncTurn(lane, LANE, "proj", "scene-1", H) as t1:
        raise KeyError("render bug")
    assert lane.history(LANE).entries[0].outcome == "failed"

    def boom() -> str:
        raise OSError("socket closed mid-submit")

    with pytest.raises(OSError), SyncTurn(lane, LANE, "proj", "scene-2", H, journal=journal) as t2:
        t2.submit(boom)
    assert t2.turn.kept_ticket
    assert [t.ticket_id for t in lane.status(LANE).held] == [t2.ticket_id]
    provider = FakeProvider()
    with SyncTurn(lane, LANE, "proj", "scene-2", H, journal=journal) as t3:
        assert t3.ticket_id == t2.ticket_id
        with pytest.raises(ReconcileRequired):
            t3.submit(provider.submit_sync)
        assert t3.reconcile(lambda: "job-found") == "job-found"
        assert t3.resumable
        assert t3.run(submit=provider.submit_sync, poll=provider.poll_sync) == "completed"
    assert provider.submits == [] and provider.polls == ["job-found"]
    assert t1.ticket_id != t2.ticket_id


def test_sync_turn_human_check_and_lease_lost(
    sync_clients: Callable[..., SyncLaneClient],
) -> None:
    lane, hand = sync_clients(), sync_clients("studio-a", None)

    def wall() -> str:
        raise ProviderHumanCheck("Turnstile")

    with pytest.raises(ProviderHumanCheck), SyncTurn(lane, LANE, "p", "s1", H) as t:
        t.submit(wall)
    assert t.turn.human_checked and lane.status(LANE).pause is not None
    assert lane.history(LANE).entries[0].outcome == "not-submitted"

    other = sync_clients("studio-b", "claim-b")  # a lane that is not paused
    lane2 = "render:main"
    with (
        pytest.raises(LeaseLost),
        SyncTurn(other, lane2, "p", "s2", H, lease_seconds=15, heartbeat_interval=0.05) as t2,
    ):
        assert t2.ticket_id is not None
        assert hand.release(lane2, t2.ticket_id).reason == "not-owner"  # other machine
        mine = sync_clients("studio-b", None)
        assert mine.release(lane2, t2.ticket_id).released
        wait_for(lambda: t2.lease_lost)
        assert t2.needs == "rerender:lease-lost"
        t2.check()


def _options(cls: type) -> list[tuple[str, object, object, object]]:
    """The constructor's parameters after the backend/client: (name, kind, default, type)."""
    params = list(inspect.signature(cls).parameters.values())[1:]
    return [(p.name, p.kind, p.default, p.annotation) for p in params]


def test_sync_turn_takes_exactly_turns_options() -> None:
    """Same names, kinds, defaults and (spelled) types as Turn's, so they cannot drift."""
    turn, sync = _options(Turn), _options(SyncTurn)
    assert sync == turn
    names = [name for name, kind, _, _ in turn if kind is inspect.Parameter.KEYWORD_ONLY]
    assert "lease_seconds" in names and "stream" in names and len(names) == 12
    client = next(iter(inspect.signature(SyncTurn).parameters.values()))
    assert client.name == "client" and client.annotation == "SyncLaneClient"
    assert all(p.kind is not p.VAR_KEYWORD for p in inspect.signature(SyncTurn).parameters.values())


def test_sync_turn_passes_every_option_to_its_turn(
    sync_clients: Callable[..., SyncLaneClient], journal: Journal
) -> None:
    lane = sync_clients()
    stream = io.StringIO()

    def on_wait(update: object) -> None:
        pass

    t = SyncTurn(lane, LANE, "p", "s", H, lease_seconds=45, heartbeat_interval=5,
                 refusal_retry_seconds=2, journal=journal, on_wait=on_wait, wait_seconds=7,
                 max_wait=90, cooldown_seconds=60, receipts=False, stream=stream).turn  # fmt: skip
    assert (t.lease_seconds, t.heartbeat_interval, t.refusal_retry_seconds) == (45, 5, 2)
    assert (t.journal, t.on_wait, t.wait_seconds, t.max_wait) == (journal, on_wait, 7, 90)
    assert (t.cooldown_seconds, t.write_receipts, t.out) == (60, False, stream)
    assert not t.cancel_on_lease_lost
    settings = dataclasses.replace(load_settings(mint_claim=False, use_keyring=False),
                                   human_check_cooldown_seconds=123.0)  # fmt: skip
    assert SyncTurn(lane, LANE, "p", "s", H, settings=settings).turn.cooldown_seconds == 123.0
    with pytest.raises(ValueError, match="cancel_on_lease_lost"):
        SyncTurn(lane, LANE, "p", "s", H, cancel_on_lease_lost=True)
    with pytest.raises(TypeError):
        SyncTurn(lane, LANE, "p", "s", H, lease_secs=45)  # type: ignore[call-arg]
