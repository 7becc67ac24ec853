"""Parked long polls (coordinator/actor/parking.py): a park is resolved by a committed
change to its ticket, by a pause change or a wake-up of the whole lane, at once when a
wake-up came since the caller read the lane, and at once while draining."""

from __future__ import annotations

import asyncio

from coordinator.actor.parking import Parking
from coordinator.engine.model import Effects


async def test_a_park_waits_for_its_ticket() -> None:
    p = Parking()
    a, b = p.park("t_a"), p.park("t_b")
    assert p and not a.done() and not b.done()
    fx = Effects()
    fx.woken.add("t_a")
    p.wake(fx)
    assert a.done() and not b.done()
    await asyncio.sleep(0)  # the done callback forgets it
    p.wake(Effects(pause_changed=True))  # a pause change wakes everyone
    assert b.done()
    await asyncio.sleep(0)
    assert not p


async def test_a_wake_up_since_the_caller_read_the_lane_resolves_at_once() -> None:
    p = Parking()
    seen = p.wakes
    p.wake_all()  # e.g. another replica's notification, while the transaction ran
    assert p.park("t_a", since=seen).done()
    assert not p.park("t_b", since=p.wakes).done()


async def test_draining_answers_every_park_and_parks_no_new_one() -> None:
    p = Parking()
    parked = p.park("t_a")
    p.drain()
    assert parked.done() and p.park("t_b").done()


async def test_clear_resolves_and_forgets_everything() -> None:
    p = Parking()
    futs = [p.park("t_a"), p.park("t_a"), p.park("t_b")]
    p.clear()
    assert all(f.done() for f in futs) and not p
