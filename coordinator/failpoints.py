"""Failpoints for fault tests, in the spirit of etcd's gofail: named points in the code that
do nothing unless the environment variable LANE_COORDINATOR_FAILPOINTS arms them.

    LANE_COORDINATOR_FAILPOINTS="pg.lane_locked=1*stop@lane=solo:frozen"

The variable is read once, at import. Unset (production), `ENABLED` is False and a point is
written `if failpoints.ENABLED: failpoints.hit("name", lane=...)`: one module-level constant
check, nothing else. The grammar, one or more points separated by `;`:

    point := NAME "=" [COUNT "*"] ACTION ["(" ARG ")"] ("@" KEY "=" VALUE)*

- ACTION: `stop` (the process sends itself SIGSTOP: a real freeze of every thread, until
  someone sends SIGCONT), `sleep(SECONDS)` (the calling thread sleeps), `off`.
- COUNT: the action runs only the first COUNT times the point is hit with its conditions met
  (then the point is off); without it, every time.
- Conditions: `@lane=L` (the point's `lane` is L), `@file=PATH` (only once PATH exists: a
  test arms the point at the moment it chooses by creating the file). All must hold.

A point that fires logs `failpoint.hit` (warning) first. The points in the code:

| point | where | context |
|---|---|---|
| `pg.lane_locked` | PostgresLaneStore.begin_load, the lane's row locked (FOR UPDATE) | `lane` |

A malformed variable is refused at import (ValueError naming it): a test that meant to arm a
point never runs without it.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import structlog

ENV: Final = "LANE_COORDINATOR_FAILPOINTS"
ACTIONS: Final = frozenset({"stop", "sleep", "off"})
CONDITIONS: Final = frozenset({"lane", "file"})

_TERM = re.compile(
    r"(?:(?P<count>\d+)\*)?(?P<action>[a-z]+)(?:\((?P<arg>[^()]*)\))?(?P<conds>(?:@[^@]*)*)"
)
_NAME = re.compile(r"[a-z][a-z0-9_.-]*")

log = structlog.get_logger("coordinator.failpoints")


@dataclass
class Point:
    """One armed point: its action (`arg`: sleep's seconds), how many more times it may fire
    (None: always) and its conditions."""

    name: str
    action: str
    arg: float = 0.0
    remaining: int | None = None
    when: dict[str, str] = field(default_factory=dict)

    def matches(self, ctx: dict[str, str]) -> bool:
        for key, want in self.when.items():
            if key == "file":
                if not Path(want).exists():
                    return False
            elif ctx.get(key) != want:
                return False
        return True


def parse(spec: str) -> dict[str, Point]:
    """The points a LANE_COORDINATOR_FAILPOINTS value arms (ValueError when malformed)."""
    points: dict[str, Point] = {}
    for part in (p.strip() for p in spec.split(";")):
        if not part:
            continue
        name, eq, term = part.partition("=")
        name = name.strip()
        m = _TERM.fullmatch(term.strip())
        if not eq or not _NAME.fullmatch(name) or m is None:
            raise ValueError(f"{ENV}: cannot read {part!r} (name=[N*]action[(arg)][@key=value])")
        action, arg = m["action"], m["arg"]
        if action not in ACTIONS:
            raise ValueError(f"{ENV}: {name}: unknown action {action!r} ({sorted(ACTIONS)})")
        seconds = 0.0
        if action == "sleep":
            try:
                seconds = float(arg or "")
            except ValueError:
                raise ValueError(f"{ENV}: {name}: sleep needs seconds, e.g. sleep(2)") from None
        elif arg is not None:
            raise ValueError(f"{ENV}: {name}: {action} takes no argument")
        when: dict[str, str] = {}
        for cond in filter(None, m["conds"].split("@")):
            key, eq, value = cond.partition("=")
            if not eq or key not in CONDITIONS or not value:
                raise ValueError(f"{ENV}: {name}: condition {cond!r} is not lane=L or file=PATH")
            when[key] = value
        count = int(m["count"]) if m["count"] is not None else None
        points[name] = Point(name, action, seconds, count, when)
    return points


class Failpoints:
    """The armed points of one process (thread-safe: a count is taken under a lock)."""

    def __init__(self, spec: str) -> None:
        self.points = parse(spec)
        self._mutex = threading.Lock()

    def hit(self, name: str, **ctx: str) -> str | None:
        """Run the point's action when it is armed and its conditions hold; returns the
        action run (None: nothing)."""
        point = self.points.get(name)
        if point is None or point.action == "off" or not point.matches(ctx):
            return None
        with self._mutex:
            if point.remaining is not None:
                if point.remaining <= 0:
                    return None
                point.remaining -= 1
        log.warning("failpoint.hit", point=name, action=point.action, **ctx)
        if point.action == "stop":
            # Sent to this very thread: it stops before its next instruction, then every
            # other thread (a stop sent to the process could let this thread run on for a
            # while, until another thread took the signal). Returns once SIGCONT came.
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        elif point.action == "sleep":
            time.sleep(point.arg)
        return point.action


_ARMED: Final = Failpoints(os.environ.get(ENV, ""))
ENABLED: Final = bool(_ARMED.points)


def hit(name: str, **ctx: str) -> str | None:
    """The point `name` of this process (call it behind `if ENABLED:`)."""
    return _ARMED.hit(name, **ctx)
