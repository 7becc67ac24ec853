"""Group commits of every lane, run on commit threads with as few hand-offs as possible.

`run_in_executor` costs, per commit, a concurrent Future (with its Condition), a work item,
an asyncio Future chained to it, and a write to the event loop's self-pipe, each on the
loop thread that every request needs. The committer takes the commits of all lanes
instead: a commit is one item put on a queue that up to `COMMIT_THREADS` threads take from;
a thread that finishes a commit takes the next without sleeping in between; and finished
commits are handed back to the loop in batches, with one self-pipe write for all that
finished while the loop was busy. At most one commit per lane is queued or running (the
actor pipelines its groups), so a lane's connection is never used by two threads at once.
A commit thread that has had nothing to do for `IDLE_EXIT_SECONDS` ends (the next commit
starts one again), so nothing needs stopping.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

from coordinator.constants import STORE_THREADS

COMMIT_THREADS = STORE_THREADS  # commits running at once (one fsync each), across lanes
IDLE_EXIT_SECONDS = 10.0

Done = Callable[[Any, BaseException | None], None]  # (result, error), on the loop thread
_Item = tuple[Callable[..., Any], tuple[Any, ...], Done]


class Committer:
    """One per event loop (`for_loop`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int = COMMIT_THREADS) -> None:
        self._loop = loop
        self._max_threads = max(1, threads)
        self._todo: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._done: collections.deque[tuple[Done, Any, BaseException | None]] = collections.deque()
        self._lock = threading.Lock()
        self._threads = 0  # commit threads alive
        self._idle = 0  # of them, waiting for a commit
        self._delivering = False  # a delivery is scheduled on the loop

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...], done: Done) -> None:
        """Run fn(*args) on a commit thread; then done(result, error) on the loop thread."""
        self._todo.put((fn, args, done))
        with self._lock:  # (a thread that ends checks the queue under this lock)
            if self._todo.qsize() <= self._idle or self._threads >= self._max_threads:
                return  # a waiting thread takes it, or a busy one once its commit ends
            self._threads += 1
            n = self._threads
        threading.Thread(target=self._work, name=f"lane-commit_{n}", daemon=True).start()

    def _work(self) -> None:
        """A commit thread: run queued commits, hand each result back to the loop."""
        todo, done_q = self._todo, self._done
        while True:
            with self._lock:
                self._idle += 1
            try:
                fn, args, done = todo.get(timeout=IDLE_EXIT_SECONDS)
            except queue.Empty:
                with self._lock:
                    self._idle -= 1
                    if todo.empty():
                        self._threads -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
            try:
                done_q.append((done, fn(*args), None))
            except BaseException as exc:  # delivered to the lane: it answers 503
                done_q.append((done, None, exc))
            if not self._delivering:
                self._delivering = True
                with contextlib.suppress(RuntimeError):  # a closed loop waits for nothing
                    self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        """On the loop: every finished commit's callback, in the order they finished."""
        self._delivering = False
        done = self._done
        while done:
            callback, result, error = done.popleft()
            callback(result, error)


_committers: dict[asyncio.AbstractEventLoop, Committer] = {}


def for_loop(loop: asyncio.AbstractEventLoop) -> Committer:
    """The committer of this event loop (a closed loop's is forgotten)."""
    c = _committers.get(loop)
    if c is None:
        for old in [lp for lp in _committers if lp.is_closed()]:
            del _committers[old]
        c = _committers[loop] = Committer(loop)
    return c
