"""max_lanes (coordinator/actor/lane_limit.py): a new lane is admitted only while fewer
lanes are counted; configured and counted lanes always are; at the limit the stored lanes
are listed again (at most once a RESCAN_SECONDS), so a removed lane frees its place."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coordinator.actor import lane_limit
from coordinator.actor.lane_limit import RESCAN_SECONDS, LaneLimit
from coordinator.errors import StoreError
from coordinator.metrics import NullMetrics
from coordinator.protocol.errors import Unavailable
from tests.harness.config import make_config


class Metrics(NullMetrics):
    def __init__(self) -> None:
        self.refused = 0

    def lane_limit_refused(self) -> None:
        self.refused += 1


class Listing:
    """The store's lanes (`stored`), listed on demand; `fail`: the store is down."""

    def __init__(self, stored: list[str]) -> None:
        self.stored = stored
        self.calls = 0
        self.fail = False

    async def __call__(self) -> list[str]:
        self.calls += 1
        if self.fail:
            raise StoreError("database down")
        return list(self.stored)


@pytest.fixture
def monotonic(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(lane_limit, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


def limit(
    stored: list[str], max_lanes: int, lanes: dict[str, int] | None = None
) -> tuple[LaneLimit, Listing, Metrics]:
    listing, metrics = Listing(stored), Metrics()
    cfg = make_config(max_lanes=max_lanes, lanes=lanes or {})
    lim = LaneLimit(cfg, metrics, listing)
    lim.listed(list(stored))
    return lim, listing, metrics


async def test_new_lanes_are_admitted_until_the_limit(monotonic: list[float]) -> None:
    lim, _, metrics = limit(["solo:a"], 3)
    await lim.admit("solo:b", [])
    await lim.admit("solo:c", [])
    assert lim.count() == 3
    with pytest.raises(Unavailable, match="max_lanes = 3"):
        await lim.admit("solo:d", [])
    assert metrics.refused == 1
    await lim.admit("solo:a", [])  # counted already: always admitted
    lim.forget("solo:c")  # its creation stored nothing
    await lim.admit("solo:d", [])


async def test_configured_lanes_count_and_are_always_admitted(monotonic: list[float]) -> None:
    lim, _, _ = limit([], 2, lanes={"solo:x": 1, "solo:y": 1})
    assert lim.count() == 2
    await lim.admit("solo:x", [])
    with pytest.raises(Unavailable):
        await lim.admit("solo:new", [])


async def test_at_the_limit_the_store_is_listed_again_at_most_once_a_second(
    monotonic: list[float],
) -> None:
    lim, listing, _ = limit(["solo:a", "solo:b"], 2)
    monotonic[0] += RESCAN_SECONDS
    listing.stored = ["solo:a"]  # solo:b's file was removed
    await lim.admit("solo:c", [])  # the rescan freed a place
    assert listing.calls == 1 and lim.stored == ["solo:a"]
    listing.stored = []
    with pytest.raises(Unavailable):
        await lim.admit("solo:d", [])  # within a second: not listed again
    assert listing.calls == 1
    monotonic[0] += RESCAN_SECONDS
    with pytest.raises(Unavailable):  # lanes open now count whatever the listing says
        await lim.admit("solo:d", ["solo:a", "solo:c"])
    assert listing.calls == 2


async def test_a_store_that_cannot_list_keeps_the_last_listing(monotonic: list[float]) -> None:
    lim, listing, _ = limit(["solo:a", "solo:b"], 2)
    listing.fail = True
    monotonic[0] += RESCAN_SECONDS
    with pytest.raises(Unavailable):
        await lim.admit("solo:c", [])
    assert listing.calls == 1 and lim.stored == ["solo:a", "solo:b"]
