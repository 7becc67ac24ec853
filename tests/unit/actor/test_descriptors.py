"""The descriptor budget (coordinator/actor/descriptors.py): how many lanes may hold their
file at once, and which let go first (least recently used)."""

from __future__ import annotations

import resource

import pytest

from coordinator.actor.descriptors import (
    FD_RESERVE,
    FDS_PER_LANE,
    MAX_OPEN_LANES,
    MIN_OPEN_LANES,
    ConnectionLru,
    lane_budget,
    open_file_limit,
)


def test_the_budget_leaves_room_for_connections() -> None:
    assert lane_budget(256, 1000) == (256 - 64 - 128) // 3
    assert lane_budget(512, 1000) == (512 - 64 - 256) // 3
    assert lane_budget(400, 10) == (400 - FD_RESERVE - 10) // FDS_PER_LANE  # few connections
    assert lane_budget(65536, 1000) == MAX_OPEN_LANES  # memory caps it
    assert lane_budget(64, 1000) == MIN_OPEN_LANES  # never below the minimum
    lru = ConnectionLru(2)
    assert lru.used("a") == [] and lru.used("b") == [] and lru.used("a") == []
    assert lru.used("c") == ["b"]  # b was used least recently
    lru.forget("a")
    assert len(lru) == 1


def test_going_far_over_the_budget_lets_go_of_the_oldest_first() -> None:
    lru = ConnectionLru(3)
    for lane in "abcde":
        lru.used(lane)
    assert len(lru) == 3
    lru.budget = 1  # (tests lower it on a running server)
    assert lru.used("c") == ["d", "e"]
    lru.forget("nothing")  # a lane not counted: nothing happens
    assert len(lru) == 1


def test_the_open_file_limit_is_the_soft_limit_or_large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (1024, 4096))
    assert open_file_limit() == 1024
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (resource.RLIM_INFINITY, 4096))
    assert open_file_limit() == 1 << 20
