"""One peer-table run: start every chosen system (a SKIPPED row for one that cannot be had),
then `rounds` rounds — in each, every system's 100 lanes × 1 client, then every system's
1 lane × 16 clients, so that a change in the machine's load falls on all of them alike — then
each system's hand-offs, then (`profile_seconds` > 0) one more 100 × 1 window under py-spy
for ours on SQLite and on one replica (bench/peers/profile.py); everything stopped at the
end, on failure and on Ctrl-C (the cancellation runs the `finally`). A system that fails
mid-way keeps its error and the others go on."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import median
from bench.peers.base import System, Unavailable
from bench.peers.etcd_peer import Etcd
from bench.peers.ours import Fifo, OursPostgres, OursSqlite
from bench.peers.pg_shared import SharedPostgres
from bench.peers.plain_pg import PlainPostgres
from bench.peers.profile import Profile, profiled
from bench.peers.redis_peer import Redis
from bench.peers.shapes import Round, handoff, throughput
from bench.report import note

MANY_LANES = 100
CONTENDED_CLIENTS = 16
PROFILED = ("sqlite", "pg1")  # the systems whose CPU targets get a profile beside them


def build(pg: SharedPostgres) -> list[System]:
    """Every system, in the table's order."""
    return [
        OursSqlite(),
        OursPostgres(pg, 1),
        OursPostgres(pg, 2),
        Etcd(),
        PlainPostgres(pg),
        Redis(),
        Fifo(),
    ]


@dataclass(slots=True)
class Result:
    system: System
    skipped: str | None = None
    error: str | None = None
    many: list[Round] = field(default_factory=list)  # 100 lanes × 1 client, per round
    contended: list[Round] = field(default_factory=list)  # 1 lane × 16 clients
    gaps: list[float] = field(default_factory=list)  # hand-offs, ms
    profile: Profile | str | None = None  # where our server's CPU went, or why not measured

    @property
    def live(self) -> bool:
        return self.skipped is None and self.error is None

    def rate(self, which: str) -> float:
        rounds = self.many if which == "many" else self.contended
        return median(r.per_second for r in rounds)

    def cpu_ms(self, part: str = "server") -> float:
        return median(r.cpu_ms.get(part, float("nan")) for r in self.many)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]


async def _guarded(r: Result, what: str, step: Callable[[], Awaitable[None]]) -> None:
    """Run one measurement of a live system; an error ends that system's part of the run."""
    try:
        await step()
    except Unavailable as exc:
        r.skipped = str(exc)
    except Exception as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # Ctrl-C: its servers died first
            raise asyncio.CancelledError from exc
        r.error = f"{what}: {_why(exc)}"
        note(f"peers: {r.system.key} failed in {what}: {r.error}")


async def run_peers(
    tmp: Path,
    keys: Iterable[str],
    *,
    seconds: float,
    rounds: int,
    handoffs: int,
    pg_fsync: bool = True,
    profile_seconds: float = 0.0,
) -> list[Result]:
    pg = SharedPostgres(pg_fsync)
    wanted = set(keys)
    results = [Result(s) for s in build(pg) if s.key in wanted]
    many = [f"bench:peer100-{i}" for i in range(MANY_LANES)]
    try:
        for r in results:
            note(f"peers: starting {r.system.key}")
            await _guarded(r, "start", functools.partial(r.system.start, tmp))
        for n in range(max(1, rounds)):
            for r in (x for x in results if x.live):
                note(f"peers: round {n + 1}, {r.system.key}, 100 lanes × 1 client")

                async def one(r: Result = r) -> None:
                    r.many.append(await throughput(r.system, many, 1, seconds))

                await _guarded(r, "100 lanes × 1 client", one)
            for r in (x for x in results if x.live):
                note(f"peers: round {n + 1}, {r.system.key}, 1 lane × 16 clients")

                async def two(r: Result = r) -> None:
                    lane = ["bench:peer16"]
                    r.contended.append(await throughput(r.system, lane, CONTENDED_CLIENTS, seconds))

                await _guarded(r, "1 lane × 16 clients", two)
        for r in (x for x in results if x.live):
            note(f"peers: {r.system.key}, {handoffs} hand-offs")

            async def gaps(r: Result = r) -> None:
                r.gaps = await handoff(r.system, "bench:peer-handoff", handoffs)

            await _guarded(r, "hand-off", gaps)
        spied_on = [x for x in results if x.live and x.system.key in PROFILED]
        for r in spied_on if profile_seconds > 0 else []:
            note(f"peers: {r.system.key}, 100 lanes × 1 client under py-spy")

            async def spied(r: Result = r) -> None:
                out = tmp / f"profile-{r.system.key}.txt"
                r.profile = await profiled(r.system, many, profile_seconds, out)

            await _guarded(r, "profile", spied)
    finally:
        for r in results:
            with contextlib.suppress(Exception):
                await r.system.stop()
        await pg.close()
    return results
