"""`SyncLaneClient`: the same calls for plain (non-async) Python drivers.

It owns one event-loop thread; every method submits the async call to it and blocks for the
answer, so errors (including `PreProviderError`) are raised in the caller's thread.

    # shared or local, per docs/protocol.md#client-config
    with SyncLaneClient.from_settings() as lane:
        r = lane.acquire("seedance-direct:main-unlimited", "proj", "scene-1", "ab12")
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

from client.api import (
    DEFAULT_COOLDOWN_REASON,
    DEFAULT_RETRY,
    DEFAULT_TIMEOUT_SECONDS,
    LaneBackend,
    LaneClient,
    RetryPolicy,
)
from client.models import (
    CooldownReply,
    EvidenceReply,
    HeartbeatReply,
    HistoryReply,
    IncidentsReply,
    LaneReply,
    LanesReply,
    MachinesReply,
    ReceiptReply,
    ReleaseReply,
    StatusReply,
)
from coordinator.protocol import constants as P

T = TypeVar("T")


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopped = False
        self.thread = threading.Thread(target=self._main, name="lane-client-loop", daemon=True)
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("SyncLaneClient called from its own event-loop thread")
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()
            raise

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        self._stopped = True
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()


class SyncLaneClient:
    """Blocking wrapper around a `LaneBackend` (a `LaneClient` unless told otherwise).

    It has every public method of `LaneClient`, with the same parameters, blocking and
    returning what the coroutine returns (`with_claim` returns a `SyncLaneClient`);
    tests/client/test_client_api.py::test_sync_facade_mirrors_lane_client enforces it. The
    one extra method is `run` (any coroutine on this facade's loop thread).
    """

    def __init__(
        self,
        url: str,
        token: str,
        machine_id: str,
        claim_id: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        required: bool = False,
        retry: RetryPolicy = DEFAULT_RETRY,
        _backend: Callable[[], LaneBackend] | None = None,
    ) -> None:
        def make() -> LaneBackend:
            return LaneClient(
                url, token, machine_id, claim_id, timeout=timeout, required=required, retry=retry
            )

        factory = _backend or make
        backend = factory()  # raises config/PreProviderError before any thread starts
        self._runner = _LoopThread()
        self.backend: LaneBackend = backend
        self._closed = False
        self._owner = True  # False for a `with_claim` sibling: it shares the loop and session

    @classmethod
    def wrap(cls, backend: LaneBackend) -> SyncLaneClient:
        """Drive an existing backend (created without a running loop) synchronously."""
        return cls("", "", "", _backend=lambda: backend)

    @classmethod
    def from_settings(cls, settings: Any = None) -> SyncLaneClient:
        """`client.config.connect(settings)` behind the sync facade."""
        from client.config import connect

        return cls.wrap(connect(settings))

    @property
    def kind(self) -> str:
        return self.backend.kind

    @property
    def machine_id(self) -> str:
        return self.backend.machine_id

    @property
    def claim_id(self) -> str | None:
        return self.backend.claim_id

    def __repr__(self) -> str:
        return f"SyncLaneClient({self.backend!r})"

    def __enter__(self) -> SyncLaneClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the backend and stop the loop thread (a `with_claim` sibling only stops
        answering: the loop thread and the HTTP session belong to the facade it came from)."""
        if self._closed:
            return
        self._closed = True
        if not self._owner:
            return
        try:
            self._runner.run(self.backend.close())
        finally:
            self._runner.stop()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run any coroutine on this facade's loop thread (where the backend lives) and block
        for its result; used by `client.driver.SyncTurn`."""
        return self._call(coro)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed or self._runner.stopped:
            coro.close()
            raise RuntimeError("SyncLaneClient is closed")
        return self._runner.run(coro)

    def with_claim(self, claim_id: str | None) -> SyncLaneClient:
        """A sibling facade for the same coordinator (or local queue), token, machine and
        timeouts that sends another claim (None: the machine-only owner rule, as a hand call
        from this computer). It shares this facade's loop thread and HTTP session: close this
        facade, not the sibling (closing the sibling only makes it refuse further calls)."""
        make = getattr(self.backend, "with_claim", None)
        if make is None:
            raise TypeError(f"{type(self.backend).__name__} has no with_claim")

        async def sibling() -> LaneBackend:
            view: LaneBackend = make(claim_id)  # on the loop: it may open the HTTP session
            return view

        backend = self._call(sibling())
        twin = SyncLaneClient.__new__(SyncLaneClient)
        twin._runner, twin.backend, twin._closed, twin._owner = self._runner, backend, False, False
        return twin

    def _client(self) -> LaneClient:
        if not isinstance(self.backend, LaneClient):
            raise TypeError("control-room reads need the shared coordinator (LaneClient)")
        return self.backend

    # ---- lane operations

    def acquire(
        self,
        lane: str,
        project: str,
        scene: str,
        prompt_hash: str,
        lease_seconds: float | None = None,
    ) -> LaneReply:
        return self._call(self.backend.acquire(lane, project, scene, prompt_hash, lease_seconds))

    def await_ticket(
        self, lane: str, ticket_id: str, wait_seconds: float = P.DEFAULT_AWAIT_SECONDS
    ) -> LaneReply:
        return self._call(self.backend.await_ticket(lane, ticket_id, wait_seconds))

    def heartbeat(
        self, lane: str, ticket_id: str, lease_seconds: float | None = None
    ) -> HeartbeatReply:
        return self._call(self.backend.heartbeat(lane, ticket_id, lease_seconds))

    def release(
        self,
        lane: str,
        ticket_id: str,
        outcome: str | None = None,
        provider_job_id: str | None = None,
        note: str | None = None,
    ) -> ReleaseReply:
        return self._call(self.backend.release(lane, ticket_id, outcome, provider_job_id, note))

    def receipt(
        self,
        lane: str,
        ticket_id: str,
        phase: str,
        payload: dict[str, Any],
        content_hash: str | None = None,
        *,
        receipt_id: str | None = None,
    ) -> ReceiptReply:
        return self._call(
            self.backend.receipt(
                lane, ticket_id, phase, payload, content_hash, receipt_id=receipt_id
            )
        )

    def cooldown(
        self,
        lane: str,
        ticket_id: str,
        retry_after_seconds: float,
        reason_code: str = DEFAULT_COOLDOWN_REASON,
    ) -> CooldownReply:
        return self._call(self.backend.cooldown(lane, ticket_id, retry_after_seconds, reason_code))

    def status(self, lane: str, include_receipts: bool = False) -> StatusReply:
        return self._call(self.backend.status(lane, include_receipts))

    def history(
        self, lane: str, limit: int = P.DEFAULT_HISTORY_LIMIT, project: str | None = None
    ) -> HistoryReply:
        return self._call(self.backend.history(lane, limit, project))

    # ---- control-room reads (shared coordinator only)

    def lanes(self) -> LanesReply:
        return self._call(self._client().lanes())

    def incidents(
        self, lane: str | None = None, limit: int = P.DEFAULT_INCIDENTS_LIMIT
    ) -> IncidentsReply:
        return self._call(self._client().incidents(lane, limit))

    def machines(self) -> MachinesReply:
        return self._call(self._client().machines())

    def evidence(self, lane: str, ticket_id: str | None = None) -> EvidenceReply:
        return self._call(self._client().evidence(lane, ticket_id))

    def healthz(self) -> bool:
        """GET /healthz (public); True when the coordinator answers {"ok": true}."""
        return self._call(self._client().healthz())
