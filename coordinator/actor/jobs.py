"""What a lane actor runs: jobs (`Ctx` is what a job sees), the engine operation as a job,
and the bookkeeping of a job's reply until its group is durable."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from coordinator.engine.lane import LaneCore
from coordinator.engine.model import Effects
from coordinator.engine.operations import Operation, Result
from coordinator.engine.store import NO_NEEDS, Reads
from coordinator.errors import StoreError

if TYPE_CHECKING:
    from coordinator.actor.lane_actor import LaneActor

T = TypeVar("T")
R = TypeVar("R")


@dataclass(slots=True)
class Ctx:
    """What a job sees: the core, the one `now` of this operation, and a store reader."""

    actor: LaneActor
    now: float
    fx: Effects = field(default_factory=Effects)

    @property
    def core(self) -> LaneCore:
        assert self.actor.core is not None
        return self.actor.core

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        if not self.actor.in_transaction:  # shared mode reads inside the lane transaction
            await self.actor._barrier()
        return await self.actor._run(fn, *args)

    async def perform(self, op: Operation[R]) -> Result[R]:
        """Run an engine operation: its store reads (only when it needs any: a read waits
        for the pending group's commit), then its pure part; its effects join the group."""
        needs = op.needs(self.core)
        if needs is NO_NEEDS or not needs:
            reads = Reads()
        else:
            reads = await self.read(Reads.perform, self.actor.store, needs)
        result = op.run(self.core, self.now, reads)
        self.fx.extend(result.fx)
        return result

    def park(self, ticket_id: str) -> asyncio.Future[None]:
        return self.actor._park(ticket_id)


Job = Callable[[Ctx], Awaitable[Any]]


def operation_job(op: Operation[Any], parked: list[asyncio.Future[None]] | None = None) -> Job:
    """A job that performs `op` and answers its reply; with `parked`, a long poll parks on
    the ticket the operation names (inside the job, so no wake-up is lost)."""

    async def job(ctx: Ctx) -> Any:
        result = await ctx.perform(op)
        if result.park is not None and parked is not None:
            parked.append(ctx.park(result.park))
        return result.reply

    return job


class StaleLane(StoreError):
    """The lane's stored version is not the one this actor built its memory from."""


@dataclass(slots=True)
class Pending:
    future: asyncio.Future[Any]
    result: Any = None
    error: BaseException | None = None


async def noop_job(ctx: Ctx) -> None:
    """Nothing but the lane's clock: whatever fell due (expiries, pauses) is done."""
    return None
