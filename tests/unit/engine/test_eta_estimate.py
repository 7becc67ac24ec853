"""The ETA's inputs and arithmetic (coordinator/engine/eta_estimate.py;
docs/protocol.md#fairness): the hold samples (the lane's and each project's, kept
incrementally exactly as a rebuild from the store's window gives them), the slots' free
times, the simulated grant order — each ticket ahead takes the slot that frees first for its
own project's hold — and the whole-wave tail beyond the simulated tickets, which never makes
the ETA decrease with position."""

from __future__ import annotations

import random

import pytest

from coordinator.constants import ETA_HOLD_SAMPLE_SIZE, ETA_HOLD_WINDOW
from coordinator.engine.eta_estimate import HoldSamples, free_times, kth_grant, wait_at, waits
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import LaneSnapshot
from tests.unit.kit import LANE, Harness, make_settings


def _slow(window: list[tuple[str, float]], default: float) -> tuple[float, dict[str, float]]:
    """The lane's and each project's hold, the slow way, from the last ETA_HOLD_WINDOW."""
    w = window[-ETA_HOLD_WINDOW:]
    lane = [s for _, s in w][-ETA_HOLD_SAMPLE_SIZE:]
    lane_hold = sum(lane) / len(lane) if lane else default
    out = {}
    for p in {p for p, _ in w}:
        mine = [s for q, s in w if q == p][-ETA_HOLD_SAMPLE_SIZE:]
        out[p] = sum(mine) / len(mine)
    return lane_hold, out


def test_hold_samples_before_any_hold_read_the_default() -> None:
    h = HoldSamples([], 300.0)
    assert h.lane() == 300.0 and h.project("p") == 300.0 and h.recent() == []


def test_a_project_with_holds_reads_its_own_mean_others_the_lanes() -> None:
    h = HoldSamples([("film", 100.0), ("ad", 700.0), ("film", 200.0)], 300.0)
    assert h.project("film") == 150.0 and h.project("ad") == 700.0
    assert h.lane() == pytest.approx(1000.0 / 3) == h.project("new")


def test_hold_samples_kept_incrementally_equal_a_rebuild_from_the_window() -> None:
    rng = random.Random(11)
    h = HoldSamples([], 300.0)
    seen: list[tuple[str, float]] = []
    projects = ["a", "b", "c", "rare"]
    for _ in range(900):
        p = rng.choices(projects, weights=[10, 5, 3, 0.2])[0]
        x = round(rng.uniform(10, 900), 1)
        h.add(p, x)
        seen.append((p, x))
        lane, per = _slow(seen, 300.0)
        assert h.lane() == pytest.approx(lane)
        for q in projects:
            assert h.project(q) == pytest.approx(per.get(q, lane)), q
    assert h.recent() == seen[-ETA_HOLD_WINDOW:]
    again = HoldSamples(h.recent(), 300.0)
    assert [again.project(q) for q in projects] == [h.project(q) for q in projects]
    h.add("a", 1.0)  # a new hold: the remembered means are worked out again
    lane, per = _slow([*seen, ("a", 1.0)], 300.0)
    assert h.lane() == pytest.approx(lane) and h.project("a") == pytest.approx(per["a"])


def test_free_times_pad_free_slots_and_drop_the_surplus() -> None:
    assert free_times([], 2) == [0.0, 0.0]
    assert free_times([50.0], 2) == [0.0, 50.0]
    assert free_times([30.0, 10.0], 2) == [10.0, 30.0]
    # three takers on two slots (capacity lowered): a slot frees once two have ended
    assert free_times([30.0, 10.0, 90.0], 2) == [30.0, 90.0]
    assert free_times([5.0], 0) == [5.0]  # an ETA still reads on a lane of capacity 0


def test_each_ticket_takes_the_slot_that_frees_first_for_its_own_hold() -> None:
    # two slots free at 0 and 100; tickets ahead hold 50, 400, 50, 50
    assert waits([0.0, 100.0], [50.0, 400.0, 50.0, 50.0], 4, 300.0) == [0, 50, 100, 150]
    # one slot, uniform holds: whole waves; past the simulated tickets, the tail hold
    assert waits([20.0], [300.0] * 3, 3, 300.0) == [20.0, 320.0, 620.0]
    assert waits([20.0], [100.0, 100.0], 5, 300.0) == [20.0, 120.0, 220.0, 520.0, 820.0]


def test_wait_at_is_the_simulation_then_the_tail_and_never_decreases() -> None:
    free = [0.0, 900.0]  # an in-flight job blocks the second slot for 900 s
    ahead = [100.0, 100.0, 100.0]
    ws = [wait_at(free, ahead, p, 300.0) for p in range(1, 12)]
    assert ws[:4] == [0.0, 100.0, 200.0, 300.0]  # slot 1 serves while slot 2 is blocked
    # beyond the simulated tickets, each holds the lane's 300 s (slots at 300 and 900 after
    # the three): the fourth ahead takes 300 and frees it at 600, then 900 twice, 1200 ...
    assert ws[4:8] == [600.0, 900.0, 900.0, 1200.0]
    assert ws == waits(free, ahead, 11, 300.0) == sorted(ws)


@pytest.mark.parametrize("seed", range(6))
def test_the_closed_form_tail_is_the_simulation(seed: int) -> None:
    """kth_grant (the tail, in closed form) is what simulating every ticket gives; the
    waits never decrease with position; one ticket's wait is its place in the list."""
    rng = random.Random(seed)
    for _ in range(60):
        free = sorted(rng.uniform(0, 3000) for _ in range(rng.randint(1, 5)))
        ahead = [rng.uniform(10, 900) for _ in range(rng.randint(0, 12))]
        hold = rng.choice([45.0, 300.0, 1234.5])
        listed = waits(free, ahead, 80, hold)
        every = waits(free, [*ahead, *[hold] * 80], 80, hold)  # all simulated
        assert listed == pytest.approx(every)
        assert listed == sorted(listed)
        assert [wait_at(free, ahead, p, hold) for p in range(1, 81)] == listed
    assert kth_grant([5.0, 7.0], 3, 0.0) == 5.0  # holds of 0 s: every grant at once


def test_the_lane_core_uses_each_projects_hold() -> None:
    """A lane whose film renders take 100 s and ad renders 700 s: a film ticket queued behind
    a held ad waits for the ad's hold, and one behind a held film for the film's."""
    snap = LaneSnapshot(recent_holds=[("film", 100.0), ("ad", 700.0)] * 3)
    h = Harness(1, snapshot=snap, hold=300.0)
    ad = h.tid("ad")
    film1 = h.acquire("film")
    assert film1["ticket"]["etaSeconds"] == 700.0  # the ad's slot, not the lane's 400 s
    film2 = h.acquire("film")
    # round robin: film1, then film2 behind it holding 100 s
    assert film2["ticket"]["etaSeconds"] == 800.0
    st = h.core.status(h.now, 10).to_wire()
    assert [t["etaSeconds"] for t in st["queued"]] == [700.0, 800.0]
    h.later(50).release(ad)  # a 50 s ad: the ad mean moves, film1 is granted
    assert h.core.hold_samples.project("ad") == pytest.approx((700.0 * 3 + 50.0) / 4)
    assert h.view(film2["ticket"]["ticketId"])["etaSeconds"] == 100.0
    rebuilt = LaneCore(
        LANE,
        make_settings(1, hold=300.0),
        LaneSnapshot(recent_holds=h.core.hold_samples.recent()),
        h.now,
    )
    assert rebuilt.hold_samples.project("ad") == h.core.hold_samples.project("ad")
