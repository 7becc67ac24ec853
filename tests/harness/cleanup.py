"""What the harness started ends with the run, however the run ends.

One registry of cleanup callbacks (throwaway PostgreSQL clusters, child processes, temp dirs).
It runs, newest first, at interpreter exit (atexit) AND when the run is killed: SIGTERM (a CI
time limit, `timeout`, `kill`) or SIGINT (Ctrl-C, `kill -INT`), whose handlers
`install_signal_handlers()` puts in place once (tests/conftest.py's `pytest_configure`):

- SIGTERM: run the registry, then the previous handler; where that was the default, the
  default again (the process dies of SIGTERM: its exit status still says "killed").
- SIGINT: run the registry, then the previous handler (normally Python's, which raises
  KeyboardInterrupt: pytest reports "Interrupted", runs its fixture teardowns, which find
  everything already ended, and exits 2). Ending things at once, not at teardown, is what
  makes them go either way: a test that started a process without a fixture has no teardown.
- A signal that arrives while the registry runs waits until it is done (a second Ctrl-C does
  not abort a half-stopped cluster); a SIGTERM that arrived during the atexit run is then
  acted on.

`register(fn)` returns a handle for `unregister(handle)` (call it once the thing is ended
normally). Callbacks run once, in the process that registered them (a forked child does not
run its parent's), each guarded: one failing does not stop the others. `track_process(popen,
group=)` registers ending a subprocess (and, for one started with `start_new_session=True`,
its process group); `remove_at_exit(path)` a temp dir. Signals are per process: under
pytest-xdist each worker installs its own handlers (its conftest loads there), and without it
the single pytest process does.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

Callback = Callable[[], None]
SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
PROCESS_GRACE = 3.0  # seconds a tracked process gets after SIGTERM before SIGKILL

_lock = threading.RLock()
_callbacks: dict[int, tuple[int, str, Callback]] = {}  # handle -> (owner pid, name, fn)
_handles = itertools.count(1)
_running = False
_pending: list[int] = []  # signals that arrived while the registry ran
_previous: dict[int, SignalHandler] = {}  # signal -> the handler ours replaced


def register(fn: Callback, name: str = "") -> int:
    """Run `fn` at exit or on SIGTERM/SIGINT (once); returns the handle for `unregister`."""
    with _lock:
        handle = next(_handles)
        _callbacks[handle] = (os.getpid(), name or getattr(fn, "__qualname__", repr(fn)), fn)
        return handle


def unregister(handle: int) -> None:
    """Forget a callback (the thing it ends has ended); nothing when it is already gone."""
    with _lock:
        _callbacks.pop(handle, None)


def pending() -> list[str]:
    """The names of the callbacks still registered by this process (newest last)."""
    with _lock:
        me = os.getpid()
        return [name for pid, name, _ in _callbacks.values() if pid == me]


def run_all() -> None:
    """Run (and forget) every callback this process registered, newest first."""
    global _running
    with _lock:
        if _running:
            return
        _running = True
    try:
        while True:
            with _lock:
                mine = [h for h, (pid, _, _) in _callbacks.items() if pid == os.getpid()]
                if not mine:
                    break
                _, name, fn = _callbacks.pop(max(mine))
            try:
                fn()
            except BaseException:  # one failing must not keep the others running
                sys.stderr.write(f"tests.harness.cleanup: {name} failed:\n")
                traceback.print_exc()
    finally:
        with _lock:
            _running = False


def _at_exit() -> None:
    run_all()
    with _lock:
        late = [s for s in _pending if s == signal.SIGTERM]
        _pending.clear()
    if late:  # SIGTERM during the exit-time cleanup: die of it now that it is done
        _die_of(signal.SIGTERM)


atexit.register(_at_exit)


# ---------------------------------------------------------------------- signals


def _die_of(signum: int) -> None:
    """End this process with `signum`'s default action (its exit status says so)."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    time.sleep(1.0)  # the default action is due; should it not come, exit as a shell would
    os._exit(128 + signum)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    with _lock:
        if _running:  # the registry is running (atexit, or the handler of another signal)
            _pending.append(signum)
            return
    run_all()
    previous = _previous.get(signum)
    if callable(previous):
        previous(signum, frame)  # SIGINT: Python's default raises KeyboardInterrupt
    elif previous in (signal.SIG_DFL, None):
        _die_of(signum)
    # SIG_IGN: never installed over (see install_signal_handlers)


def install_signal_handlers() -> bool:
    """Put the SIGTERM/SIGINT handlers in place (once per process, main thread only);
    returns whether they are in place. A signal the process ignores stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return False
    with _lock:
        for signum in HANDLED_SIGNALS:
            current = signal.getsignal(signum)
            if current is _on_signal or current == signal.SIG_IGN:
                continue
            _previous[signum] = current
            signal.signal(signum, _on_signal)
    return True


def installed() -> bool:
    return all(signal.getsignal(s) is _on_signal for s in HANDLED_SIGNALS)


# ---------------------------------------------------------------------- helpers


def end_process(
    proc: subprocess.Popen[Any], *, group: bool = False, grace: float = PROCESS_GRACE
) -> None:
    """SIGTERM (and SIGCONT, should it be stopped), up to `grace` seconds, then SIGKILL; reaps
    it. `group`: signal its process group (it leads one: `start_new_session=True`), so its
    own children go too. Only while Popen has not reaped it: until then its pid (and so its
    group id) cannot belong to another process."""
    if proc.returncode is not None:
        return

    def send(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(proc.pid, sig)
            else:
                os.kill(proc.pid, sig)

    send(signal.SIGTERM)
    send(signal.SIGCONT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    if group:  # stragglers of the group, the leader gone or not
        send(signal.SIGKILL)
    if proc.poll() is None:
        send(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


def track_process(proc: subprocess.Popen[Any], *, group: bool = False, name: str = "") -> int:
    """Register ending `proc` (see `end_process`); returns the handle."""
    label = name or f"process {proc.pid} {proc.args!r}"[:120]
    return register(lambda: end_process(proc, group=group), label)


def remove_at_exit(path: Path) -> int:
    """Register removing the dir `path` (ignoring errors); returns the handle."""
    return register(lambda: shutil.rmtree(path, ignore_errors=True), f"remove {path}")
