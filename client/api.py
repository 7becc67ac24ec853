"""`LaneClient`: one async method per SPEC §4 endpoint, typed replies, fail-closed when required.

    async with LaneClient(url, token, "studio-a", claim_id) as lane:
        r = await lane.acquire("seedance-direct:main-unlimited", "proj", "scene-1", "ab12")
        while not r.granted and r.ticket.state == "queued":
            r = await lane.await_ticket(r.lane, r.ticket_id)

With `required=True` every failure that leaves the lane unconfirmed — connection refused,
timeout, 401/403, 5xx, a non-JSON or malformed reply, or a coordinator that is not
`actor-sqlite` — raises `PreProviderError` naming the cause. Ticket-level answers about the
request itself (400 bad-request, 404 not-found, 409) keep their own error classes.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import msgspec

from client.clock import monotonic
from client.errors import (
    BadRequestError,
    ConfigError,
    CoordinatorTimeoutError,
    CoordinatorUnreachableError,
    LaneClientError,
    MalformedReplyError,
    PreProviderError,
    UnsupportedProtocolError,
    error_for,
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
    ReceiptRow,
    ReleaseReply,
    StatusReply,
)
from coordinator import __version__
from coordinator.protocol import constants as P
from coordinator.protocol.errors import LaneError
from coordinator.protocol.receipts import canonical_json, receipt_id_for
from coordinator.protocol.receipts import content_hash as hash_of_canonical

PROTOCOL_VERSION = P.PROTOCOL_VERSION
SHARED_KIND = P.ACTOR_SQLITE
# Every kind a shared coordinator reports: one server on SQLite, replicas on PostgreSQL.
SHARED_KINDS = P.SHARED_KINDS
LOCAL_KIND = P.LOCAL_SQLITE
DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_COOLDOWN_REASON = P.COOLDOWN_REASONS[0]

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


def safe_url(url: str) -> str:
    """The URL without any user:password part (never echo a credential)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _url_problem(url: str) -> str | None:
    """Why `url` cannot be the coordinator's base URL (None when it can): checked up front so
    a bad value is a configuration error (a PreProviderError when required), never an
    aiohttp ValueError at the first call."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError when out of range or not a number
    except ValueError:
        return "not a valid URL"
    if parts.scheme not in ("http", "https"):
        return "must start with http:// or https://"
    if not parts.hostname:
        return "no host name"
    if parts.username is not None or parts.password is not None:
        return "must not carry user:password@ (the token goes in LANE_TOKEN)"
    return None


def receipt_fields(
    ticket_id: str,
    phase: str,
    payload: dict[str, Any],
    content_hash: str | None,
    receipt_id: str | None,
) -> tuple[str, str, str]:
    """(receiptId, contentHash sent, contentHash computed) for a receipt payload.

    The hash is sha256 over the payload's RFC 8785 canonical JSON; the id is
    `<ticketId>:<phase>:<first 16 hex of the sent hash>` unless one is given.
    """
    if not isinstance(payload, dict):
        raise BadRequestError(message="payload: must be a JSON object")
    try:
        computed = hash_of_canonical(canonical_json(payload))
    except LaneError as exc:
        raise BadRequestError(message=exc.message) from None
    except (TypeError, ValueError) as exc:
        raise BadRequestError(message=f"payload: not JSON-serializable ({exc})") from None
    sent = content_hash or computed
    rid = receipt_id or receipt_id_for(ticket_id, phase, sent)
    return rid, sent, computed


def check_lane_reply_kind(data: dict[str, Any], required: bool, url: str) -> None:
    kind = data.get("coordinator")
    if required and kind not in SHARED_KINDS:
        raise PreProviderError(
            f"the coordinator at {url} reports coordinator={kind!r}, "
            f"not one of {sorted(SHARED_KINDS)}: "
            "it is not the shared coordinator"
        )


class LaneClient:
    """The shared coordinator over HTTP (aiohttp). One instance per driver process."""

    kind = SHARED_KIND

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
    ) -> None:
        self.url = (url or "").rstrip("/")
        self._token = token or ""
        self.machine_id = machine_id or ""
        self.claim_id = claim_id or None
        self.timeout = float(timeout)
        self.required = required
        self._session = session
        self._own_session = session is None
        missing = []
        if not self.url:
            missing.append("LANE_COORDINATOR_URL")
        elif (url_problem := _url_problem(self.url)) is not None:
            missing.append(f"LANE_COORDINATOR_URL ({url_problem})")
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
        """A sibling for the same coordinator, token, machine and timeouts that sends another
        claim (None: the machine-only owner rule of SPEC §4.3). It shares this client's HTTP
        session (close this client, not the sibling). A restarted driver uses it to finish
        the ticket its crashed predecessor held (client/driver.py). Call it inside the loop."""
        return LaneClient(
            self.url,
            self._token,
            self.machine_id,
            claim_id,
            timeout=self.timeout,
            required=self.required,
            session=self._client_session(),
        )

    async def __aenter__(self) -> LaneClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_session and self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None if self._own_session else self._session

    # ------------------------------------------------------------------ transport

    def _client_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            if not self._own_session:
                raise ConfigError(message="the aiohttp session given to LaneClient is closed")
            self._session = aiohttp.ClientSession(
                headers={"User-Agent": f"lane-client/{__version__}"}
            )
        return self._session

    def _fail(self, err: LaneClientError) -> LaneClientError:
        """Under LANE_REQUIRED=1, a failure that leaves the lane unconfirmed is pre-provider."""
        if not self.required or isinstance(err, PreProviderError):
            return err
        where = safe_url(self.url)
        cause: str | None = None
        if isinstance(err, CoordinatorTimeoutError):
            cause = f"timeout: {err.message}"
        elif isinstance(err, CoordinatorUnreachableError):
            cause = f"unreachable: {err.message}"
        elif isinstance(err, MalformedReplyError):
            cause = f"malformed reply from {where}: {err.message}"
        elif err.status == 401:
            cause = f"unauthorized (HTTP 401) at {where}: the token was not accepted"
        elif err.status == 403:
            cause = f"forbidden (HTTP 403 {err.code}) at {where}: {err.message}"
        elif err.status >= 500 or isinstance(err, UnsupportedProtocolError):
            cause = f"coordinator at {where} answered HTTP {err.status} {err.code}: {err.message}"
        return PreProviderError(cause, err) if cause is not None else err

    async def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> tuple[int, dict[str, Any]]:
        total = self.timeout if timeout is None else timeout
        what = f"{method} {path}"
        where = safe_url(self.url)
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        data: bytes | None = None
        if body is not None:
            data = msgspec.json.encode(body)
            headers["Content-Type"] = "application/json"
        err: LaneClientError | None = None
        status, raw, ctype = 0, b"", ""
        try:
            session = self._client_session()
            async with session.request(
                method,
                self.url + path,
                data=data,
                params=params,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=total),
                allow_redirects=False,
            ) as resp:
                status, ctype = resp.status, resp.content_type
                raw = await resp.read()
        except TimeoutError:
            err = CoordinatorTimeoutError(
                message=f"no answer from {where} within {total:g} s ({what})"
            )
        except aiohttp.ClientConnectorError as exc:
            reason = exc.os_error.strerror if exc.os_error is not None else None
            err = CoordinatorUnreachableError(
                message=f"cannot connect to {where} ({reason or type(exc).__name__}) ({what})"
            )
        except aiohttp.InvalidURL:
            err = ConfigError(message=f"LANE_COORDINATOR_URL: {where} is not a valid URL")
        except (aiohttp.ClientError, OSError) as exc:
            err = CoordinatorUnreachableError(
                message=f"{type(exc).__name__} talking to {where} ({what})"
            )
        if err is not None:
            if isinstance(err, ConfigError) and self.required:
                raise PreProviderError(err.message, err) from None
            raise self._fail(err) from None
        try:
            decoded: Any = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            raise self._fail(
                MalformedReplyError(
                    status=status,
                    message=f"{what}: HTTP {status} reply is not JSON "
                    f"(content type {ctype or 'none'})",
                )
            ) from None
        if status >= 400:
            e = decoded.get("error") if isinstance(decoded, dict) else None
            if isinstance(e, dict) and isinstance(e.get("code"), str):
                msg = e.get("message")
                raise self._fail(
                    error_for(e["code"], status, msg if isinstance(msg, str) else e["code"])
                ) from None
            raise self._fail(
                MalformedReplyError(
                    status=status, message=f"{what}: HTTP {status} without an error body"
                )
            ) from None
        if status not in (200, 201) or not isinstance(decoded, dict):
            raise self._fail(
                MalformedReplyError(
                    status=status,
                    message=f"{what}: expected a JSON object with HTTP 200/201, got HTTP {status}",
                )
            ) from None
        check_lane_reply_kind(decoded, self.required, where)
        return status, decoded

    def _convert(self, data: dict[str, Any], kind: type[S], what: str, status: int = 200) -> S:
        try:
            return msgspec.convert(data, kind)
        except msgspec.ValidationError as exc:
            raise self._fail(
                MalformedReplyError(
                    status=status, message=f"{what}: reply does not match the protocol ({exc})"
                )
            ) from None

    def _mutation(self, lane: str, **fields: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "protocolVersion": PROTOCOL_VERSION,
            "lane": lane,
            "machineId": self.machine_id,
        }
        if self.claim_id is not None:
            body["claimId"] = self.claim_id
        body.update({k: v for k, v in fields.items() if v is not None})
        return body

    async def _post(
        self, op: str, body: dict[str, Any], kind: type[S], timeout: float | None = None
    ) -> S:
        path = f"/v1/lanes/{op}"
        status, data = await self._request("POST", path, body, timeout=timeout)
        return self._convert(data, kind, f"POST {path}", status)

    # ------------------------------------------------------------------ SPEC §4 endpoints

    async def acquire(
        self,
        lane: str,
        project: str,
        scene: str,
        prompt_hash: str,
        lease_seconds: float | None = None,
    ) -> LaneReply:
        body = self._mutation(
            lane, project=project, scene=scene, promptHash=prompt_hash, leaseSeconds=lease_seconds
        )
        return await self._post("acquire", body, LaneReply)

    async def await_ticket(
        self, lane: str, ticket_id: str, wait_seconds: float = P.DEFAULT_AWAIT_SECONDS
    ) -> LaneReply:
        body = self._mutation(lane, ticketId=ticket_id, waitSeconds=wait_seconds)
        # The long poll gets its own timeout: the wait plus the per-call timeout as margin.
        own = float(wait_seconds) + self.timeout
        return await self._post("await", body, LaneReply, timeout=own)

    async def heartbeat(
        self, lane: str, ticket_id: str, lease_seconds: float | None = None
    ) -> HeartbeatReply:
        body = self._mutation(lane, ticketId=ticket_id, leaseSeconds=lease_seconds)
        return await self._post("heartbeat", body, HeartbeatReply)

    async def release(
        self,
        lane: str,
        ticket_id: str,
        outcome: str | None = None,
        provider_job_id: str | None = None,
        note: str | None = None,
    ) -> ReleaseReply:
        body = self._mutation(
            lane, ticketId=ticket_id, outcome=outcome, providerJobId=provider_job_id, note=note
        )
        return await self._post("release", body, ReleaseReply)

    async def receipt(
        self,
        lane: str,
        ticket_id: str,
        phase: str,
        payload: dict[str, Any],
        content_hash: str | None = None,
        *,
        receipt_id: str | None = None,
    ) -> ReceiptReply:
        """Append one receipt. The receiptId and sha256 (RFC 8785) are computed here; a given
        `content_hash` overrides the computed one (the coordinator flags a mismatch), a given
        `receipt_id` overrides the derived id (used to prove the 409 conflict)."""
        rid, sent, _ = receipt_fields(ticket_id, phase, payload, content_hash, receipt_id)
        body = self._mutation(
            lane,
            ticketId=ticket_id,
            receiptId=rid,
            phase=phase,
            payload=payload,
            contentHash=sent,
        )
        status, data = await self._request("POST", "/v1/lanes/receipt", body)
        reply = self._convert(data, ReceiptReply, "POST /v1/lanes/receipt", status)
        reply.receipt_id, reply.content_hash, reply.http_status = rid, sent, status
        return reply

    async def cooldown(
        self,
        lane: str,
        ticket_id: str,
        retry_after_seconds: float,
        reason_code: str = DEFAULT_COOLDOWN_REASON,
    ) -> CooldownReply:
        body = self._mutation(
            lane, ticketId=ticket_id, reasonCode=reason_code, retryAfterSeconds=retry_after_seconds
        )
        return await self._post("cooldown", body, CooldownReply)

    async def status(self, lane: str, include_receipts: bool = False) -> StatusReply:
        body: dict[str, Any] = {
            "protocolVersion": PROTOCOL_VERSION,
            "lane": lane,
            "machineId": self.machine_id,
            "includeReceipts": include_receipts,
        }
        status, data = await self._request("POST", "/v1/lanes/status", body)
        return parse_status(data, lambda d: self._convert(d, StatusReply, "status", status))

    async def history(
        self, lane: str, limit: int = P.DEFAULT_HISTORY_LIMIT, project: str | None = None
    ) -> HistoryReply:
        body: dict[str, Any] = {
            "protocolVersion": PROTOCOL_VERSION,
            "lane": lane,
            "machineId": self.machine_id,
            "limit": limit,
        }
        if project is not None:
            body["project"] = project
        return await self._post("history", body, HistoryReply)

    # ------------------------------------------------------------------ control-room reads

    async def _get(self, path: str, kind: type[S], params: dict[str, str] | None = None) -> S:
        status, data = await self._request("GET", path, params=params)
        return self._convert(data, kind, f"GET {path}", status)

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
    "DEFAULT_TIMEOUT_SECONDS",
    "LOCAL_KIND",
    "PROTOCOL_VERSION",
    "SHARED_KIND",
    "SHARED_KINDS",
    "LaneBackend",
    "LaneClient",
    "parse_status",
    "receipt_fields",
    "safe_url",
    "wait_for_grant",
]
