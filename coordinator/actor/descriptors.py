"""How many lanes may hold their store connection at once, from the process's descriptor
limit (and at most MAX_OPEN_LANES, for memory), and which to let go of first (least
recently used).

A SQLite lane holds three descriptors while its connection is open (the database, its -wal
and -shm). The budget leaves room for the HTTP connections and the rest of the process, so
lanes with live tickets are bounded by memory, not by descriptors: a lane over the budget
keeps its memory and its alarm; its connection is closed and opened again on its next call.
"""

from __future__ import annotations

import resource
from collections import OrderedDict

FDS_PER_LANE = 3  # the database, its -wal and -shm
FD_RESERVE = 64  # listening socket, lock file, presence store, logs, PostgreSQL, imports
MIN_OPEN_LANES = 4  # below this, serving would thrash: the budget never goes lower
# Memory: an open lane file costs about 200 KB (SQLite's per-connection lookaside, the parsed
# schema, cached statements); reopening one costs about a millisecond. At most this many.
MAX_OPEN_LANES = 128
# A lane whose file was let go of opens it again this long before its next alarm (a store
# thread's work: creating the -wal and -shm), so the alarm's commit does not wait for it.
PREOPEN_SECONDS = 0.1


def open_file_limit() -> int:
    """The soft RLIMIT_NOFILE (a large number when unlimited)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else int(soft)


def lane_budget(limit: int, max_connections: int) -> int:
    """Lanes that may hold a connection at once under `limit` descriptors, while up to
    max_connections HTTP connections (at most half the limit) are open."""
    for_http = min(max_connections, limit // 2)
    by_descriptors = (limit - FD_RESERVE - for_http) // FDS_PER_LANE
    return max(MIN_OPEN_LANES, min(MAX_OPEN_LANES, by_descriptors))


class ConnectionLru:
    """Lanes believed to hold a connection, least recently used first."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._order: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._order)

    def used(self, lane: str) -> list[str]:
        """`lane` was used (it holds its connection now): the lanes to let go of, oldest
        first, so that at most `budget` hold one."""
        self._order[lane] = None
        self._order.move_to_end(lane)
        over = len(self._order) - self.budget
        if over <= 0:
            return []
        out = []
        for old in list(self._order)[:over]:
            del self._order[old]
            out.append(old)
        return out

    def forget(self, lane: str) -> None:
        self._order.pop(lane, None)
