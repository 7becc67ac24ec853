"""`SyncTurn`: the driver's turn for plain (non-async) Python, on `client.sync.SyncLaneClient`.

It takes exactly `Turn`'s options — the same names, types and defaults, spelled out (a test
compares the two constructors, so they cannot drift) — and runs the `Turn` and its heartbeats
on the facade's loop thread; your provider functions run in your thread.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import IO, TYPE_CHECKING, Any, TypeVar, TypeVarTuple

from client.driver.errors import DriverError, NotSubmitted, ReconcileRequired
from client.driver.journal import Journal, Record
from client.driver.options import WaitUpdate
from client.driver.receipts import Receipts
from client.driver.turn import Turn
from client.forward import Forward
from client.models import CooldownReply, InFlightJob
from coordinator.protocol.constants import DEFAULT_LEASE_SECONDS

if TYPE_CHECKING:
    from client.config import Settings
    from client.sync import SyncLaneClient

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class SyncTurn:
    """`Turn` for plain (non-async) drivers, on a `SyncLaneClient` (its loop thread runs the
    turn and its heartbeats; your provider functions run in YOUR thread).

        with SyncLaneClient.from_settings() as lane:
            with SyncTurn(lane, lane_name, project, scene, prompt_hash, journal=j) as turn:
                status = turn.run(submit=lambda: provider.submit(req), poll=provider.wait)

    A sync provider call cannot be cancelled: on a lost lease `poll` cannot stop your
    function, so call `turn.check()` (raises LeaseLost) inside long loops. `on_wait` runs on
    the loop thread. `cancel_on_lease_lost=True` is not available here (ValueError).
    """

    def __init__(
        self,
        client: SyncLaneClient,
        lane: str,
        project: str,
        scene: str,
        prompt_hash: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        heartbeat_interval: float | None = None,
        refusal_retry_seconds: float | None = None,
        journal: Journal | None = None,
        on_wait: Callable[[WaitUpdate], None] | None = None,
        wait_seconds: float = 30.0,
        max_wait: float | None = None,
        cooldown_seconds: float | None = None,
        settings: Settings | None = None,
        receipts: bool = True,
        cancel_on_lease_lost: bool = False,
        stream: IO[str] | None = None,
    ) -> None:
        if cancel_on_lease_lost:
            raise ValueError("cancel_on_lease_lost: not available on SyncTurn")
        self._client = client

        async def make() -> Turn:
            return Turn(
                client.backend,
                lane,
                project,
                scene,
                prompt_hash,
                lease_seconds=lease_seconds,
                heartbeat_interval=heartbeat_interval,
                refusal_retry_seconds=refusal_retry_seconds,
                journal=journal,
                on_wait=on_wait,
                wait_seconds=wait_seconds,
                max_wait=max_wait,
                cooldown_seconds=cooldown_seconds,
                settings=settings,
                receipts=receipts,
                stream=stream,
            )

        self.turn: Turn = client.run(make())

    def _on_loop(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        async def call() -> T:
            return fn(*args)

        return self._client.run(call())

    def _await(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._client.run(coro)

    def __enter__(self) -> SyncTurn:
        self._await(self.turn.__aenter__())
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._await(self.turn.__aexit__(*exc_info))

    def __repr__(self) -> str:
        return f"Sync{self.turn!r}"

    # caller-settable fields and state: the turn's own
    outcome: Forward[str | None] = Forward("turn", settable=True)
    provider_job_id: Forward[str | None] = Forward("turn", settable=True)
    note: Forward[str | None] = Forward("turn", settable=True)
    ticket_id: Forward[str | None] = Forward("turn")
    fence: Forward[int | None] = Forward("turn")
    lease_lost: Forward[bool] = Forward("turn")
    needs: Forward[str | None] = Forward("turn")
    pending: Forward[Record | None] = Forward("turn")
    resumable: Forward[bool] = Forward("turn")
    under_hold: Forward[bool] = Forward("turn")
    hold: Forward[InFlightJob | None] = Forward("turn")
    receipts: Forward[Receipts | None] = Forward("turn")

    def check(self) -> None:
        self._on_loop(self.turn.check)

    def submit(self, fn: Callable[[], str]) -> str:
        self._on_loop(self.turn._begin_submit)
        try:
            job_id = fn()
        except NotSubmitted:
            self._on_loop(self.turn._submit_not_accepted)
            raise
        except BaseException as exc:
            self._on_loop(self.turn._submit_failed, exc)
            raise
        self._on_loop(self.turn._end_submit, job_id)
        self._await(self.turn._receipt_submitted(job_id))
        return job_id

    def reconcile(self, find: Callable[[], str | None]) -> str | None:
        if not self.turn.needs_reconcile:
            return self.turn.provider_job_id if self.turn.resumable else None
        job_id = find()
        self._on_loop(self.turn._settle_unknown, job_id)
        if job_id is not None:
            self._await(self.turn._receipt_submitted(job_id))
        return job_id

    def poll(self, poll: Callable[[str], str], job_id: str | None = None) -> str:
        job = job_id or self.turn.provider_job_id
        if job is None:
            raise DriverError("nothing was submitted in this turn: no job to poll")
        self.check()
        status = poll(job)
        self._await(self.turn.terminal(status))
        self.check()
        return status

    def resume(self, poll: Callable[[str], str]) -> str:
        job = self._on_loop(self.turn._resumable_job)
        return self.poll(poll, job)

    def run(
        self,
        submit: Callable[[], str],
        poll: Callable[[str], str],
        reconcile: Callable[[], str | None] | None = None,
    ) -> str:
        if self.turn.needs_reconcile:
            if reconcile is None:
                raise ReconcileRequired(
                    "this window has a submit of unknown fate: pass reconcile= to run()"
                )
            self.reconcile(reconcile)
        if self.turn.resumable:
            return self.resume(poll)
        self.submit(submit)
        return self.poll(poll)

    def references_applied(
        self,
        reference_hashes: list[str] | tuple[str, ...],
        *,
        required_slots: int | None = None,
        provider_media_ids: list[str] | tuple[str, ...] = (),
    ) -> None:
        self._await(
            self.turn.references_applied(
                reference_hashes,
                required_slots=required_slots,
                provider_media_ids=provider_media_ids,
            )
        )

    def human_check(self, retry_after_seconds: float | None = None) -> CooldownReply | None:
        return self._await(self.turn.human_check(retry_after_seconds))


__all__ = ["SyncTurn"]
