"""`LaneClient`: one async method per endpoint (docs/protocol.md#http-api), typed replies,
fail-closed when required.

    async with LaneClient(url, token, "studio-a", claim_id) as lane:
        r = await lane.acquire("seedance-direct:main-unlimited", "proj", "scene-1", "ab12")
        while not r.granted and r.ticket.state == "queued":
            r = await lane.await_ticket(r.lane, r.ticket_id)

With `required=True` every failure that leaves the lane unconfirmed — connection refused,
timeout, 401/403, 5xx, a non-JSON or malformed reply, or a coordinator that is not
`actor-sqlite` — raises `PreProviderError` naming the cause. Ticket-level answers about the
request itself (400 bad-request, 404 not-found, 409) keep their own error classes.

Every call is retried on a connection-level failure or a 503 `unavailable` answer, with
backoff, within its timeout (`retry=`, client/transport.py; docs/client.md#retries): every
lane call is safe to repeat.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import aiohttp
import msgspec

from client.backend import DEFAULT_COOLDOWN_REASON, receipt_fields
from client.clock import monotonic
from client.errors import ConfigError, PreProviderError
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
    ReceiptRow,
    ReconcileReply,
    ReleaseReply,
    StatusReply,
    WhoamiReply,
)
from client.transport import (
    DEFAULT_RETRY,
    NO_RETRY,
    HttpTransport,
    RetryPolicy,
    safe_url,
    url_problem,
)
from coordinator.protocol import constants as P

PROTOCOL_VERSION = P.PROTOCOL_VERSION
SHARED_KIND = P.ACTOR_SQLITE
# Every kind a shared coordinator reports: one server on SQLite, replicas on PostgreSQL.
SHARED_KINDS = P.SHARED_KINDS
LOCAL_KIND = P.LOCAL_SQLITE
DEFAULT_TIMEOUT_SECONDS = 10.0
S = TypeVar("S")


class LaneBackend(Protocol):
    """What a driver codes against: the shared coordinator (`LaneClient`) or the local
    single-computer queue (`LocalQueue`)."""

    @property
    def kind(self) -> str:
        """ "actor-sqlite" (shared coordinator) or "local-sqlite" (local queue)."""
        ...

    @property
    def machine_id(self) -> str: ...

    @property
    def claim_id(self) -> str | None: ...

    async def acquire(
        self,
        lane: str,
        project: str,
        scene: str,
        prompt_hash: str,
        lease_seconds: float | None = None,
    ) -> LaneReply: ...

    async def await_ticket(
        self, lane: str, ticket_id: str, wait_seconds: float = P.DEFAULT_AWAIT_SECONDS
    ) -> LaneReply: ...

    async def heartbeat(
        self, lane: str, ticket_id: str, lease_seconds: float | None = None
    ) -> HeartbeatReply: ...

    async def release(
        self,
        lane: str,
        ticket_id: str,
        outcome: str | None = None,
        provider_job_id: str | None = None,
        note: str | None = None,
    ) -> ReleaseReply: ...

    async def reconcile(
        self,
        lane: str,
        ticket_id: str,
        outcome: str,
        provider_job_id: str | None = None,
        note: str | None = None,
    ) -> ReconcileReply: ...

    async def receipt(
        self,
        lane: str,
        ticket_id: str,
        phase: str,
        payload: dict[str, Any],
        content_hash: str | None = None,
        *,
        receipt_id: str | None = None,
    ) -> ReceiptReply: ...

    async def cooldown(
        self,
        lane: str,
        ticket_id: str,
        retry_after_seconds: float,
        reason_code: str = DEFAULT_COOLDOWN_REASON,
    ) -> CooldownReply: ...

    async def status(self, lane: str, include_receipts: bool = False) -> StatusReply: ...

    async def history(
        self, lane: str, limit: int = P.DEFAULT_HISTORY_LIMIT, project: str | None = None
    ) -> HistoryReply: ...

    async def close(self) -> None: ...


class LaneClient(HttpTransport):
    """The shared coordinator over HTTP (aiohttp). One instance per driver process."""

    reported_kind: str | None = None  # set by the transport from each reply

    @property
    def kind(self) -> str:
        """The shared coordinator's kind as its last reply said: "actor-sqlite" (one server)
        or "actor-postgres" (replicas); "actor-sqlite" until the first reply."""
        return self.reported_kind or SHARED_KIND

    def __init__(
        self,
        url: str,
        token: str,
        machine_id: str,
        claim_id: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        required: bool = False,
        session: aiohttp.ClientSession | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        self.url = (url or "").rstrip("/")
        self._token = token or ""
        self.machine_id = machine_id or ""
        self.claim_id = claim_id or None
        self.timeout = float(timeout)
        self.required = required
        self.retry = retry
        self._session = session
        self._own_session = session is None
        missing = []
        if not self.url:
            missing.append("LANE_COORDINATOR_URL")
        elif (problem := url_problem(self.url)) is not None:
            missing.append(f"LANE_COORDINATOR_URL ({problem})")
        if not self._token:
            missing.append("LANE_TOKEN")
        if not self.machine_id:
            missing.append("LANE_MACHINE_ID")
        if missing:
            what = "missing or invalid client configuration: " + ", ".join(missing)
            if required:
                raise PreProviderError(what)
            raise ConfigError(message=what)
        if self.timeout <= 0:
            raise ConfigError(message="timeout: must be positive")

    def __repr__(self) -> str:
        return (
            f"LaneClient(url={safe_url(self.url)!r}, machine_id={self.machine_id!r}, "
            f"claim_id={self.claim_id!r}, required={self.required})"
        )

    def with_claim(self, claim_id: str | None) -> LaneClient:
        """A sibling for the same coordinator, token, machine, timeouts and retries that sends
        another claim (None: the machine-only owner rule, docs/protocol.md#owner-rule). It shares
        this client's HTTP session (close this client, not the sibling). A restarted driver uses
        it to finish the ticket its crashed predecessor held (client/driver/claim.py). Call it
        inside the loop."""
        return LaneClient(
            self.url,
            self._token,
            self.machine_id,
            claim_id,
            timeout=self.timeout,
            required=self.required,
            session=self._client_session(),
            retry=self.retry,
        )

    # ------------------------------------------------------------------ how a body is answered

    async def _send(self, op: str, lane: str, body: dict[str, Any], reply: type[S]) -> S:
        return await self._post(op, body, reply)

    async def _await(self, lane: str, body: dict[str, Any]) -> LaneReply:
        # The long poll gets its own timeout: the wait plus the per-call timeout as margin.
        # A retry asks for a shorter wait when less time is left (see `_request`).
        wait = float(body["waitSeconds"])
        own = wait + self.timeout
        return await self._post("await", body, LaneReply, timeout=own, long_poll=wait)

    async def _release(self, lane: str, body: dict[str, Any]) -> ReleaseReply:
        answer = await self._request("POST", "/v1/lanes/release", body)
        reply = self._convert(answer.data, ReleaseReply, "POST /v1/lanes/release", answer.status)
        if (
            answer.resent
            and not reply.released
            and reply.reason == "already-done"
            and reply.outcome == body.get("outcome")
        ):
            reply = msgspec.structs.replace(reply, released=True, reason=None)
        return reply

    async def _receipt(self, lane: str, body: dict[str, Any]) -> ReceiptReply:
        status, data, _ = await self._request("POST", "/v1/lanes/receipt", body)
        reply = self._convert(data, ReceiptReply, "POST /v1/lanes/receipt", status)
        reply.http_status = status
        return reply

    async def _status(self, lane: str, body: dict[str, Any]) -> StatusReply:
        status, data, _ = await self._request("POST", "/v1/lanes/status", body)
        return parse_status(data, lambda d: self._convert(d, StatusReply, "status", status))

    # ------------------------------------------------------------------ control-room reads

    async def lanes(self) -> LanesReply:
        return await self._get("/v1/lanes", LanesReply)

    async def incidents(
        self, lane: str | None = None, limit: int = P.DEFAULT_INCIDENTS_LIMIT
    ) -> IncidentsReply:
        params = {"limit": str(limit)}
        if lane is not None:
            params["lane"] = lane
        return await self._get("/v1/incidents", IncidentsReply, params)

    async def machines(self) -> MachinesReply:
        return await self._get("/v1/machines", MachinesReply)

    async def whoami(self) -> WhoamiReply:
        """The credential this client's token is: name, role, machine (docs/protocol.md#whoami)."""
        return await self._get("/v1/whoami", WhoamiReply)

    async def evidence(self, lane: str, ticket_id: str | None = None) -> EvidenceReply:
        params = {"lane": lane}
        if ticket_id is not None:
            params["ticketId"] = ticket_id
        return await self._get("/v1/evidence", EvidenceReply, params)

    async def healthz(self) -> bool:
        """GET /healthz (public); True when the coordinator answers {"ok": true}."""
        try:
            session = self._client_session()
            async with session.get(
                self.url + "/healthz", timeout=aiohttp.ClientTimeout(total=self.timeout)
            ) as resp:
                data = msgspec.json.decode(await resp.read())
        except (TimeoutError, aiohttp.ClientError, OSError, msgspec.DecodeError):
            return False
        return isinstance(data, dict) and data.get("ok") is True


def parse_status(data: dict[str, Any], convert: Any) -> StatusReply:
    """Status with a lenient receipt trail: a malformed row is skipped and counted in
    `unreadable_receipts`, never failing the whole read; absent receipt keys stay None."""
    has_rows = "recentReceipts" in data
    rows = data.pop("recentReceipts", None)
    data.pop("unreadableReceipts", None)
    reply: StatusReply = convert(data)
    if has_rows:
        good: list[ReceiptRow] = []
        bad = 0
        for row in rows if isinstance(rows, list) else [rows]:
            try:
                good.append(msgspec.convert(row, ReceiptRow))
            except msgspec.ValidationError:
                bad += 1
        reply.recent_receipts = good
        reply.unreadable_receipts = bad
    return reply


async def wait_for_grant(
    backend: LaneBackend,
    reply: LaneReply,
    *,
    wait_seconds: float = P.DEFAULT_AWAIT_SECONDS,
    max_wait: float | None = None,
) -> LaneReply:
    """Long-poll `await` until the ticket is no longer queued (or `max_wait` passes)."""
    deadline = None if max_wait is None else monotonic() + max_wait
    while reply.ticket.state == "queued":
        step = wait_seconds
        if deadline is not None:
            left = deadline - monotonic()
            if left <= 0:
                break
            step = max(1.0, min(step, left))
        reply = await backend.await_ticket(reply.lane, reply.ticket_id, step)
    return reply


__all__ = [
    "DEFAULT_COOLDOWN_REASON",
    "DEFAULT_RETRY",
    "DEFAULT_TIMEOUT_SECONDS",
    "LOCAL_KIND",
    "NO_RETRY",
    "PROTOCOL_VERSION",
    "SHARED_KIND",
    "SHARED_KINDS",
    "LaneBackend",
    "LaneClient",
    "RetryPolicy",
    "parse_status",
    "receipt_fields",
    "wait_for_grant",
]
