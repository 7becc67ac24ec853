"""lane-coordinator benchmarks: `make bench` (or `python -m bench [--quick] [--only 1,3]`).

One row per shape, printed as soon as it is measured: the figure, the target beside it
(docs: issue 11, "Performance to the floor") and PASS/MISS; then the rows again as a markdown
table. Throughput is always measured against a bare aiohttp JSON handler in the same run,
with the same load generator; CPU, RSS and fds are read from the server's /proc entries.

1. 100 lanes × 1 client: cycles/s (≥ 0.4× bare) and server CPU per cycle (≤ 0.6 ms)
2. 1 lane × 16 clients (≥ 0.7× bare)      3. 1 lane × 1 client (≥ 0.5× bare)
4. hand-off, release → parked await returns (p99 < 5 ms)
5. alarm lateness with 1,000 lanes armed (p99 < 10 ms)
6. RSS with 1,000 lanes holding a live ticket (≤ 150 MB); fds then and after a quiet while
7. 400 busy lanes under `ulimit -n 256` (0 errors)
8. restart over 100 and 10,000 lanes with live tickets: time-to-listen, time until every
   alarm that fell due while down has fired
9. PostgreSQL beside SQLite: 9a/9b as 2 and 1, 9c cross-replica hand-off (SKIPPED without
   PostgreSQL)
10. the ETA error on a mixed workload (two projects, varied holds, pauses; virtual time):
   median and p90, and the lane's own etaError checked against the bench's count
peers. the peer table (`--peers`, `make bench-peers`; bench/peers/): ours on SQLite and on
   PostgreSQL (one replica, two) beside etcd, Redis, the plain-PostgreSQL recipe and a bare
   FIFO semaphore, the same shapes for all, the fairness notes, where ours spends its CPU
   (py-spy, one more window), and issue 21's targets P1-P8 as ratios within the run, a MISS
   with the profile of the system it judges (a peer that cannot be had prints SKIPPED)

Exit status 1 when a shape could not be measured (an ERROR row), else 0: a MISS is a figure,
not a failure of the bench.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench import eta, pg, run
from bench.common import raise_own_fd_limit
from bench.context import Context
from bench.peers.table import TARGETS, shape_peers
from bench.report import Report
from bench.settings import SHAPES, Settings, parse
from coordinator.logs import configure_logging


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _sizes(s: Settings) -> str:
    parts = []
    if s.only - {"peers"}:
        parts.append(f"{s.seconds:g} s × {s.rounds} rounds per throughput side")
    if "peers" in s.only:
        parts.append(f"peers: {s.peer_seconds:g} s × {s.peer_rounds} rounds, median")
    return "; ".join(parts)


def _cancel_on_sigterm() -> None:
    """SIGTERM (a `timeout`, a CI limit) ends the run as Ctrl-C does: the main task is
    cancelled, so every `finally` stops the servers, clusters and peers it started."""
    task = asyncio.current_task()
    if task is not None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)


async def bench(s: Settings) -> int:
    raise_own_fd_limit()
    # Row 10 runs the coordinator in this process: only its warnings reach the report, as
    # `serve --log-level warning` for the servers the other rows start.
    configure_logging("warning")
    _cancel_on_sigterm()
    report = Report()
    runners: dict[str, Callable[[Context], Awaitable[None]]] = {
        **run.RUNNERS,
        "9": pg.shape9,
        "10": eta.shape10,
        "peers": shape_peers,
    }
    declared = {
        **run.rows(s),
        "9": pg.rows(s),
        "10": eta.rows(s),
        "peers": [(t.key, t.shape, t.target) for t in TARGETS],
    }
    with tempfile.TemporaryDirectory(prefix="lane-bench-") as tmpd:
        ctx = Context(s, Path(tmpd), report)
        print(
            f"# lane-coordinator bench ({'quick' if s.quick else 'full'} run, shapes "
            f"{','.join(x for x in SHAPES if x in s.only)}; {os.cpu_count()} cpus, load "
            f"{_load()}; {_sizes(s)})",
            flush=True,
        )
        try:
            for shape in SHAPES:
                if shape not in s.only:
                    continue
                try:
                    await runners[shape](ctx)
                except Exception as exc:
                    done = {r.key for r in report.rows}
                    for key, name, target in declared[shape]:
                        if key not in done:
                            report.error(key, name, target, exc)
        finally:
            ctx.close()
    print(f"\n# load average at the end: {_load()}\n")
    print(report.markdown(), flush=True)
    return 1 if report.failed() else 0


def main(argv: list[str] | None = None) -> int:
    settings = parse(argv)
    try:
        return asyncio.run(bench(settings))
    except KeyboardInterrupt:  # the run's `finally` blocks have stopped what it started
        print("bench: interrupted", file=sys.stderr)
        return 130
    except asyncio.CancelledError:  # SIGTERM, likewise
        print("bench: terminated", file=sys.stderr)
        return 143


if __name__ == "__main__":
    sys.exit(main())
