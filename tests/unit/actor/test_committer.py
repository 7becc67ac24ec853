"""The commit threads shared by every lane (coordinator/actor/committer.py): a commit runs
on a commit thread and its callback on the loop, a failure is delivered (never raised
there), at most `threads` commits run at once, and each loop has one committer."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from coordinator.actor import committer
from coordinator.actor.committer import Committer


class Results:
    """The callbacks' (result, error, thread) as they arrive on the loop."""

    def __init__(self) -> None:
        self.got: list[tuple[Any, BaseException | None, str]] = []
        self.event = asyncio.Event()

    def done(self, result: Any, error: BaseException | None) -> None:
        self.got.append((result, error, threading.current_thread().name))
        self.event.set()

    async def wait(self, n: int) -> None:
        while len(self.got) < n:
            self.event.clear()
            await asyncio.wait_for(self.event.wait(), 10)


async def test_a_commit_runs_on_a_commit_thread_and_answers_on_the_loop() -> None:
    c = Committer(asyncio.get_running_loop(), threads=2)
    res = Results()
    ran_on: list[str] = []

    def commit(a: int, b: int) -> int:
        ran_on.append(threading.current_thread().name)
        return a + b

    c.submit(commit, (2, 3), res.done)
    await res.wait(1)
    assert ran_on[0].startswith("lane-commit_")
    assert res.got == [(5, None, threading.current_thread().name)]  # the loop's thread


async def test_a_failed_commit_is_delivered_to_its_callback() -> None:
    c = Committer(asyncio.get_running_loop(), threads=1)
    res = Results()

    def fail() -> None:
        raise OSError("disk on fire")

    c.submit(fail, (), res.done)
    c.submit(lambda: "next", (), res.done)  # the thread goes on
    await res.wait(2)
    (r1, e1, _), (r2, e2, _) = res.got
    assert r1 is None and isinstance(e1, OSError)
    assert (r2, e2) == ("next", None)


async def test_at_most_threads_commits_run_at_once() -> None:
    c = Committer(asyncio.get_running_loop(), threads=2)
    res = Results()
    lock = threading.Lock()
    running = [0, 0]  # now, most at once

    def commit(n: int) -> int:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return n

    for n in range(8):
        c.submit(commit, (n,), res.done)
    await res.wait(8)
    assert sorted(r for r, _, _ in res.got) == list(range(8))
    assert running[1] == 2


async def test_each_loop_has_one_committer_and_a_closed_loops_is_forgotten() -> None:
    loop = asyncio.get_running_loop()
    assert committer.for_loop(loop) is committer.for_loop(loop)
    other = asyncio.new_event_loop()
    mine = committer.for_loop(other)
    other.close()
    committer.for_loop(loop)  # still this loop's: the closed one is not looked at
    assert committer._committers.get(other) is mine
    fresh = asyncio.new_event_loop()
    try:
        committer.for_loop(fresh)  # a new committer: closed loops' go
        assert other not in committer._committers
    finally:
        fresh.close()
