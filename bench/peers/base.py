"""What every system of the peer table offers the load generator: clients that acquire, wait
until held and release a slot of a lane (capacity 1 in every shape), and the pids whose CPU
time is the system's own; plus the /proc readings of a process tree (PostgreSQL's backends).

CPU time is read from /proc/PID/task/*/schedstat (nanoseconds on a CPU, per thread, summed
over the process's threads), not /proc/PID/stat: utime+stime come in clock ticks scaled from
samples, and for a hundred PostgreSQL backends that each run for a few hundred microseconds
at a time they read 3-30× too little (0.03-0.38 ms per cycle where schedstat reads 1.1 on
the plain recipe). A thread that exits within the window loses its time (the servers here
keep theirs). Where schedstat is missing, /proc/PID/stat it is."""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from bench.common import cpu_seconds

CAPACITY = 1  # every lane of every shape: a mutex, the contended case
CpuSample = dict[str, dict[int, float]]  # component ("server", "postgres") -> pid -> CPU s


class Unavailable(RuntimeError):
    """The system cannot be had here (not installed, no PostgreSQL): its row is SKIPPED."""


@dataclass(slots=True)
class Hold:
    """One acquire's place in a lane: `held` once granted; `token` and `rev` are the
    system's own handle (a ticket id, a key and its create revision...)."""

    lane: str
    token: str
    held: bool
    rev: int = 0


class Client(ABC):
    """One simulated client: its own connection(s), used by one task at a time."""

    @abstractmethod
    async def acquire(self, lane: str, i: int) -> Hold:
        """Ask for a slot of `lane` (the client's i-th request); held at once or queued."""

    @abstractmethod
    async def wait(self, hold: Hold) -> None:
        """Return once `hold` is held (the system's own wake-up)."""

    @abstractmethod
    async def release(self, hold: Hold) -> None:
        """Give the slot (or the place in the queue) back."""

    async def close(self) -> None:
        """Drop the client's connections (nothing by default: they belong to the system)."""
        return None


class System(ABC):
    """A system of the table. `start` raises Unavailable when it cannot be had."""

    key: str  # "sqlite", "pg1", "pg2", "fifo", "etcd", "redis", "plain-pg"
    title: str  # its row in the table
    notes: str  # what it lacks beside ours, where it waits in a catch-up loop
    park_seconds = 0.02  # the hand-off's waiter parks this long before the release

    @abstractmethod
    async def start(self, tmp: Path) -> None: ...

    @abstractmethod
    async def stop(self) -> None:
        """Stop what `start` started; safe to call after a failed or no start."""

    @abstractmethod
    async def client(self, k: int) -> Client:
        """Client number k (on a system of replicas: of replica k mod n)."""

    @abstractmethod
    def pids(self) -> dict[str, list[int]]:
        """component -> the pids whose CPU counts: "server" always; "postgres" for ours on
        PostgreSQL (the database's own share, shown beside)."""

    def cpu(self) -> CpuSample:
        return {part: {p: process_cpu(p) for p in pids} for part, pids in self.pids().items()}


SCHEDSTAT = Path("/proc/self/schedstat").exists()


def process_cpu(pid: int) -> float:
    """CPU seconds of a process's live threads (see the module docstring); 0.0 when gone."""
    if not SCHEDSTAT:
        return cpu_seconds(pid)
    total = 0
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total / 1e9


def cpu_delta(before: CpuSample, after: CpuSample) -> dict[str, float]:
    """CPU seconds per component between two samples (a pid new in `after` counts whole)."""
    return {
        part: sum(max(0.0, c - before.get(part, {}).get(p, 0.0)) for p, c in pids.items())
        for part, pids in after.items()
    }


def process_tree(root: int) -> list[int]:
    """`root` and its direct children (a postmaster and its backends), from /proc."""
    found = [root]
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == root:
                    found.append(int(entry.name))
    return found
