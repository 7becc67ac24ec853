"""A watchdog for blocking calls on an event loop: any one callback or task step that holds the
loop longer than a threshold is recorded, named, with the stack it was blocked in.

`LoopWatchdog(loop, threshold)` times every handle the loop runs (asyncio.Handle._run, wrapped
while a watchdog is active; a dict lookup for the loops nobody watches) — what asyncio's debug
mode does with `slow_callback_duration`, without debug mode's cost (a stack extracted at every
`call_soon`, which would itself slow the callbacks it times). A monitor thread samples the loop
thread's stack once a step has run past the threshold, so the report names the blocking line
(`time.sleep` in a handler, a synchronous storage call), not only the task.

On a loaded machine a step also takes long because the loop thread waited for a CPU (other
processes ran): that is no blocking call. Where Linux tells (/proc/self/task/TID/schedstat: the
thread's time on the run queue), that wait is taken off a step's wall time before it is judged
(the monitor samples it; the step's start is approximated by the sample before it, so up to a
sampling period of earlier waiting may be taken off too). A step excused so is kept in
`excused`, not in `blocks`.

`with dog.excusing():` excuses the steps that begin or end inside it (into `excused` too):
conftest's `start_server` starts and stops coordinators so — their start (opening SQLite, the
thread pools, re-arming alarms) runs before they listen, their stop after they stopped serving,
and both do disk I/O that a loaded CI machine makes take half a second (measured: 0.48 s once).

`blocks` holds what was found; `take()` returns and forgets it; `check()` raises `LoopBlocked`
naming each block. The conftest's `start_server` fixture runs one on the test's loop
(threshold: LOOP_BLOCK_ENV, default 0.25 s, "off" or 0 disables); a test that blocks on
purpose opts out with `@pytest.mark.allow_loop_blocking("why")`.
"""

from __future__ import annotations

import asyncio
import os
import sys
import sysconfig
import threading
import time
import traceback
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from tests.harness.config import REPO

LOOP_BLOCK_ENV = "LANE_TEST_LOOP_BLOCK_SECONDS"
DEFAULT_THRESHOLD = 0.25  # seconds: above GC pauses and a loaded 2-core CI machine's noise
STACK_LINES = 12  # frames of the sampled stack kept in a report

_LIBRARY_PATHS = (  # how a formatted stack line names code that is not ours
    *{f'"{sysconfig.get_path(k)}/' for k in ("stdlib", "platstdlib", "purelib", "platlib")},
    f'"{Path(__file__).resolve()}"',
    '"<frozen ',
)
_lock = threading.Lock()
_watched: dict[asyncio.AbstractEventLoop, LoopWatchdog] = {}
_original_run: Callable[[asyncio.Handle], None] | None = None


def threshold_from_env(environ: dict[str, str] | None = None) -> float | None:
    """The threshold LOOP_BLOCK_ENV sets (default DEFAULT_THRESHOLD); None: disabled."""
    raw = (environ if environ is not None else dict(os.environ)).get(LOOP_BLOCK_ENV, "").strip()
    if not raw:
        return DEFAULT_THRESHOLD
    if raw.lower() in ("off", "no", "false", "0"):
        return None
    value = float(raw)
    return value if value > 0 else None


class LoopBlocked(AssertionError):
    """The event loop was blocked longer than the threshold (the message names by what)."""


def _runqueue_seconds(native_id: int) -> float | None:
    """How long thread `native_id` of this process has waited for a CPU (None: unknown)."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Block:
    """One step that held the loop: how long, which callback/task, where it was blocked."""

    seconds: float  # wall time less `waited`
    callback: str
    stack: list[str] = field(default_factory=list)  # sampled while it blocked; may be empty
    waited: float = 0.0  # of its wall time, waiting for a CPU (not counted in `seconds`)

    @property
    def where(self) -> str:
        """The innermost sampled frame of our code (not the standard library's, not an
        installed package's, not the watchdog's), else the innermost one."""
        frames = [ln for ln in self.stack if ln.lstrip().startswith('File "')]
        ours = [ln for ln in frames if not any(lib in ln for lib in _LIBRARY_PATHS)]
        pick = ours[-1] if ours else frames[-1] if frames else ""
        return " ".join(pick.split()).replace(f"{REPO}/", "")

    def describe(self, threshold: float) -> str:
        head = f"blocked the event loop {self.seconds:.3f} s (> {threshold} s"
        head += f"; {self.waited:.3f} s more waiting for a CPU)" if self.waited else ")"
        head += f": {self.callback}"
        if self.where:
            head += f"\n    blocked at {self.where}"
        if self.stack:
            head += "\n    stack while blocked:\n" + "".join(
                "      " + ln.rstrip().replace("\n", "\n      ") + "\n" for ln in self.stack
            )
        return head


def _describe_handle(handle: asyncio.Handle) -> str:
    """The task whose step it was (its coroutine and where it is now), else the callback."""
    callback = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        name = getattr(coro, "__qualname__", repr(coro))
        return f"task {owner.get_name()!r} step of {name}() ({owner!r})"[:400]
    return repr(handle)[:400]


def _timed_run(handle: asyncio.Handle) -> None:
    assert _original_run is not None
    dog = _watched.get(getattr(handle, "_loop", None))  # type: ignore[arg-type]
    if dog is None:
        _original_run(handle)
        return
    token = dog._enter()
    began = time.perf_counter()
    try:
        _original_run(handle)
    finally:
        dog._leave(handle, token, began, time.perf_counter() - began)


def _install(dog: LoopWatchdog) -> None:
    global _original_run
    with _lock:
        if _original_run is None:
            _original_run = asyncio.Handle._run
            setattr(asyncio.Handle, "_run", _timed_run)  # noqa: B010 (a method, not an attr)
        _watched[dog.loop] = dog


def _uninstall(dog: LoopWatchdog) -> None:
    global _original_run
    with _lock:
        if _watched.get(dog.loop) is dog:
            del _watched[dog.loop]
        if not _watched and _original_run is not None:
            setattr(asyncio.Handle, "_run", _original_run)  # noqa: B010
            _original_run = None


class LoopWatchdog:
    """Records every step of `loop` that runs longer than `threshold` seconds (see the module
    docstring). `start()`/`stop()`, or use it as a context manager."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold: float = DEFAULT_THRESHOLD):
        self.loop = loop
        self.threshold = threshold
        self.blocks: list[Block] = []
        self.excused: list[Block] = []  # long only for the wait for a CPU
        self._current: tuple[int, float, int] | None = None  # (token, began, thread ident)
        self._native_id: int | None = None  # the loop thread's, for its schedstat
        self._waits: deque[tuple[float, float]] = deque(maxlen=2048)  # (when, run-queue s)
        self._sample: tuple[int, list[str]] | None = None  # (token, stack)
        self._tokens = 0
        self._excusing = 0  # nesting depth of excusing()
        self._excused_tokens: set[int] = set()  # steps that began while excusing
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None

    # ------------------------------------------------------------------ the loop's side

    def _enter(self) -> int:
        self._tokens += 1
        if self._native_id is None:
            self._native_id = threading.get_native_id()
        if self._excusing:
            self._excused_tokens.add(self._tokens)
        self._current = (self._tokens, time.perf_counter(), threading.get_ident())
        return self._tokens

    def _leave(self, handle: asyncio.Handle, token: int, began: float, seconds: float) -> None:
        self._current = None
        excused = token in self._excused_tokens or self._excusing > 0
        self._excused_tokens.discard(token)
        if seconds <= self.threshold:
            return
        sample = self._sample
        stack = sample[1] if sample is not None and sample[0] == token else []
        waited = self._waited_since(began)
        block = Block(seconds - waited, _describe_handle(handle), stack, waited)
        judged = block.seconds > self.threshold and not excused
        (self.blocks if judged else self.excused).append(block)

    def _waited_since(self, began: float) -> float:
        """Run-queue time of the loop thread from the last sample before `began` to now."""
        if self._native_id is None:
            return 0.0
        now = _runqueue_seconds(self._native_id)
        waits = list(self._waits)
        i = bisect_right(waits, (began, float("inf")))
        if now is None or i == 0:
            return 0.0
        return max(0.0, now - waits[i - 1][1])

    # ------------------------------------------------------------------ the monitor

    def _watch(self) -> None:
        period = min(0.05, self.threshold / 4)
        while not self._stop.wait(period):
            if self._native_id is not None:
                waited = _runqueue_seconds(self._native_id)
                if waited is not None:
                    self._waits.append((time.perf_counter(), waited))
            current = self._current
            if current is None or (self._sample is not None and self._sample[0] == current[0]):
                continue
            token, began, ident = current
            if time.perf_counter() - began <= self.threshold:
                continue
            frame: FrameType | None = sys._current_frames().get(ident)
            if frame is None:
                continue
            stack = traceback.format_stack(frame)[-STACK_LINES:]
            del frame
            if self._current is current:  # still the same step: the stack is its
                self._sample = (token, stack)

    # ------------------------------------------------------------------ the API

    def start(self) -> LoopWatchdog:
        _install(self)
        self._monitor = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        self._monitor.start()
        return self

    def stop(self) -> None:
        _uninstall(self)
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(5)
            self._monitor = None

    @contextmanager
    def excusing(self) -> Iterator[None]:
        """Steps that begin or end inside this are not judged (see the module docstring).
        Use it on the watched loop's thread."""
        self._excusing += 1
        try:
            yield
        finally:
            self._excusing -= 1

    def take(self) -> list[Block]:
        """The blocks found so far (forgotten here)."""
        found, self.blocks = self.blocks, []
        return found

    def report(self, blocks: list[Block]) -> str:
        return "\n".join(b.describe(self.threshold) for b in blocks)

    def check(self, what: str = "") -> None:
        """Raise LoopBlocked naming every block found so far (and forget them)."""
        found = self.take()
        if found:
            head = f"{len(found)} step(s) blocked the event loop{' ' + what if what else ''}"
            hint = (
                f"(threshold {LOOP_BLOCK_ENV}={self.threshold}; a test that blocks on purpose: "
                "@pytest.mark.allow_loop_blocking(reason))"
            )
            raise LoopBlocked(f"{head} {hint}:\n{self.report(found)}")

    def __enter__(self) -> LoopWatchdog:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
