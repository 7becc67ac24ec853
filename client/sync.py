"""`SyncLaneClient`: the same calls for plain (non-async) Python drivers.

It owns one event-loop thread; every method submits the async call to it and blocks for the
answer, so errors (including `PreProviderError`) are raised in the caller's thread.

    # shared or local, per docs/protocol.md#client-config
    with SyncLaneClient.from_settings() as lane:
        r = lane.acquire("seedance-direct:main-unlimited", "proj", "scene-1", "ab12")
"""

from __future__ import annotations

import asyncio
import functools
import threading
import types
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from client.api import DEFAULT_RETRY, DEFAULT_TIMEOUT_SECONDS, LaneBackend, LaneClient, RetryPolicy
from client.closing import Closing
from client.forward import Forward

T = TypeVar("T")
Params = ParamSpec("Params")


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


class _Blocking(Generic[Params, T]):
    """A `SyncLaneClient` method: the `LaneClient` coroutine method of the same name (its
    signature and docstring), called on the facade's backend — on `LaneClient` itself with
    `shared_only` (a `TypeError` on any other backend) — and run to its result on the
    facade's loop thread."""

    def __init__(
        self,
        method: Callable[Concatenate[LaneClient, Params], Coroutine[Any, Any, T]],
        *,
        shared_only: bool = False,
    ) -> None:
        name = method.__name__

        def blocking(facade: SyncLaneClient, /, *args: Params.args, **kwargs: Params.kwargs) -> T:
            target = facade._client() if shared_only else facade.backend
            coro: Coroutine[Any, Any, T] = getattr(target, name)(*args, **kwargs)
            return facade._call(coro)

        self.function = functools.wraps(method)(blocking)

    @overload
    def __get__(
        self, facade: None, owner: type | None = None
    ) -> Callable[Concatenate[SyncLaneClient, Params], T]: ...

    @overload
    def __get__(self, facade: SyncLaneClient, owner: type | None = None) -> Callable[Params, T]: ...

    def __get__(self, facade: SyncLaneClient | None, owner: type | None = None) -> Any:
        return self.function if facade is None else types.MethodType(self.function, facade)


class SyncLaneClient(Closing):
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

    kind: Forward[str] = Forward("backend")
    machine_id: Forward[str] = Forward("backend")
    claim_id: Forward[str | None] = Forward("backend")

    def __repr__(self) -> str:
        return f"SyncLaneClient({self.backend!r})"

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

    # ---- lane operations (the backend's), then the control-room reads (LaneClient's only)

    acquire = _Blocking(LaneClient.acquire)
    await_ticket = _Blocking(LaneClient.await_ticket)
    heartbeat = _Blocking(LaneClient.heartbeat)
    release = _Blocking(LaneClient.release)
    reconcile = _Blocking(LaneClient.reconcile)
    receipt = _Blocking(LaneClient.receipt)
    cooldown = _Blocking(LaneClient.cooldown)
    status = _Blocking(LaneClient.status)
    history = _Blocking(LaneClient.history)
    lanes = _Blocking(LaneClient.lanes, shared_only=True)
    incidents = _Blocking(LaneClient.incidents, shared_only=True)
    machines = _Blocking(LaneClient.machines, shared_only=True)
    whoami = _Blocking(LaneClient.whoami, shared_only=True)
    evidence = _Blocking(LaneClient.evidence, shared_only=True)
    healthz = _Blocking(LaneClient.healthz, shared_only=True)
