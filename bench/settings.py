"""The bench's knobs: `--quick` picks short defaults, `--only 1,3` picks shapes (`--peers`: only
the peer table, `--peer-systems` some of its systems), and every size can be set by an
environment variable (BENCH_SECONDS=2 make bench)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from coordinator.constants import JANITOR_INTERVAL_SECONDS, LANE_IDLE_CLOSE_SECONDS

SHAPES = ("1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "peers")
# the systems of the peer table (bench/peers/run.py), in its order
PEER_SYSTEMS = ("sqlite", "pg1", "pg2", "etcd", "plain-pg", "redis", "fifo")
# (env var, full run, --quick, what it sets)
KNOBS: dict[str, tuple[str, float, float, str]] = {
    "seconds": ("BENCH_SECONDS", 5, 1.5, "seconds per throughput measurement (each side)"),
    "rounds": ("BENCH_ROUNDS", 2, 1, "throughput rounds per side (the best is kept)"),
    "handoff_samples": ("BENCH_HANDOFF_SAMPLES", 300, 30, "hand-offs measured (4, 9)"),
    "alarm_lanes": ("BENCH_ALARM_LANES", 1000, 100, "lanes armed at once (5)"),
    "alarm_spread": ("BENCH_ALARM_SPREAD", 10, 2, "seconds over which their leases expire"),
    "memory_lanes": ("BENCH_MEMORY_LANES", 1000, 300, "lanes holding a live ticket (6)"),
    "quiet_seconds": (
        "BENCH_QUIET_SECONDS",
        LANE_IDLE_CLOSE_SECONDS + JANITOR_INTERVAL_SECONDS + 5,
        5,
        "at most this long quiet before the fds are counted again (6)",
    ),
    "fd_lanes": ("BENCH_FD_LANES", 400, 400, "busy lanes under the fd limit (7)"),
    "fd_limit": ("BENCH_FD_LIMIT", 256, 256, "ulimit -n of that server, soft and hard (7)"),
    "fd_rounds": ("BENCH_FD_ROUNDS", 5, 1, "acquire+release rounds over every lane (7)"),
    "restart_lanes": ("BENCH_RESTART_LANES", 10000, 1000, "lanes before the restart (8)"),
    "restart_small": ("BENCH_RESTART_SMALL", 100, 100, "the small restart beside it (8)"),
    "pg": ("BENCH_PG", 1, 1, "0: skip the PostgreSQL rows (9)"),
    "pg_fsync": ("BENCH_PG_FSYNC", 1, 1, "0: the PostgreSQL cluster runs with fsync=off"),
    "peer_seconds": ("BENCH_PEER_SECONDS", 8, 1.5, "seconds per peer-table measurement (peers)"),
    "peer_rounds": ("BENCH_PEER_ROUNDS", 3, 1, "peer-table rounds (the median is kept)"),
    "peer_handoffs": ("BENCH_PEER_HANDOFFS", 300, 30, "hand-offs per system (peers)"),
    "peer_profile_seconds": (
        "BENCH_PEER_PROFILE_SECONDS",
        8,
        2,
        "seconds of py-spy on ours, SQLite and one replica (peers; 0: none)",
    ),
    "eta_jobs": ("BENCH_ETA_JOBS", 600, 200, "jobs of the ETA-error workload (10)"),
}


@dataclass(frozen=True, slots=True)
class Settings:
    quick: bool
    only: frozenset[str]
    seconds: float
    rounds: int
    handoff_samples: int
    alarm_lanes: int
    alarm_spread: float
    memory_lanes: int
    quiet_seconds: float
    fd_lanes: int
    fd_limit: int
    fd_rounds: int
    restart_lanes: int
    restart_small: int
    pg: bool
    pg_fsync: bool
    peer_seconds: float
    peer_rounds: int
    peer_handoffs: int
    peer_profile_seconds: float
    peer_systems: frozenset[str]
    eta_jobs: int

    def wants(self, *shapes: str) -> bool:
        return any(s in self.only for s in shapes)


def _help() -> str:
    lines = ["sizes (environment variables; full run / --quick):"]
    for env, full, quick, what in KNOBS.values():
        lines.append(f"  {env:<22} {full:g} / {quick:g}: {what}")
    return "\n".join(lines)


def parse(argv: list[str] | None = None, env: dict[str, str] | None = None) -> Settings:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="lane-coordinator benchmarks: one row per shape, target and PASS/MISS",
        epilog=_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="short run: smaller sizes")
    p.add_argument(
        "--only", default=",".join(SHAPES), help="shapes to run, e.g. 1,3,9 (default: all)"
    )
    p.add_argument(
        "--peers", action="store_true", help="only the peer table (the same as --only peers)"
    )
    p.add_argument(
        "--peer-systems",
        default=",".join(PEER_SYSTEMS),
        help=f"systems of the peer table (default: all of {','.join(PEER_SYSTEMS)})",
    )
    args = p.parse_args(argv)
    env = dict(os.environ) if env is None else env
    only = frozenset(s.strip() for s in args.only.split(",") if s.strip())
    if args.peers:
        only = frozenset({"peers"})
    if not only or not only <= set(SHAPES):
        p.error(f"--only: shapes are {','.join(SHAPES)}")
    systems = frozenset(s.strip() for s in args.peer_systems.split(",") if s.strip())
    if not systems or not systems <= set(PEER_SYSTEMS):
        p.error(f"--peer-systems: systems are {','.join(PEER_SYSTEMS)}")
    values: dict[str, float] = {}
    for name, (var, full, quick, _) in KNOBS.items():
        raw = env.get(var)
        try:
            values[name] = float(raw) if raw else (quick if args.quick else full)
        except ValueError:
            p.error(f"{var}={raw!r}: not a number")
    v = values.__getitem__
    return Settings(
        quick=args.quick,
        only=only,
        seconds=v("seconds"),
        rounds=int(v("rounds")),
        handoff_samples=int(v("handoff_samples")),
        alarm_lanes=int(v("alarm_lanes")),
        alarm_spread=v("alarm_spread"),
        memory_lanes=int(v("memory_lanes")),
        quiet_seconds=v("quiet_seconds"),
        fd_lanes=int(v("fd_lanes")),
        fd_limit=int(v("fd_limit")),
        fd_rounds=int(v("fd_rounds")),
        restart_lanes=int(v("restart_lanes")),
        restart_small=int(v("restart_small")),
        pg=bool(v("pg")),
        pg_fsync=bool(v("pg_fsync")),
        peer_seconds=v("peer_seconds"),
        peer_rounds=int(v("peer_rounds")),
        peer_handoffs=int(v("peer_handoffs")),
        peer_profile_seconds=v("peer_profile_seconds"),
        peer_systems=systems,
        eta_jobs=int(v("eta_jobs")),
    )
