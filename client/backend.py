"""`BackendBase`: what the shared coordinator's client (`LaneClient`) and the local queue
(`LocalQueue`) share — an async context manager that closes on exit, and every lane
operation (docs/protocol.md#http-api), written once: its parameters, defaults and request
body. The type a driver codes against is `client.api.LaneBackend` (a Protocol). How a body is
answered is each backend's own (`_send`, and the hooks for the operations that differ:
`_await`, `_release`, `_receipt`, `_status`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Self, TypeVar

from client.errors import BadRequestError
from client.models import (
    CooldownReply,
    HeartbeatReply,
    HistoryReply,
    LaneReply,
    ReceiptReply,
    ReconcileReply,
    ReleaseReply,
    StatusReply,
)
from coordinator.protocol import constants as P
from coordinator.protocol.errors import LaneError
from coordinator.protocol.receipts import canonical_json, receipt_id_for
from coordinator.protocol.receipts import content_hash as hash_of_canonical

R = TypeVar("R")

DEFAULT_COOLDOWN_REASON = P.COOLDOWN_REASONS[0]


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


class BackendBase(ABC):
    """`async with backend:` closes the backend on exit. The lane operations build their
    request body here and hand it to the backend's `_send` (or one of its hooks)."""

    machine_id: str
    claim_id: str | None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @abstractmethod
    async def close(self) -> None:
        """Release what the backend holds (HTTP session, lane files)."""

    def _body(self, lane: str, *, claim: bool = True, **fields: Any) -> dict[str, Any]:
        """A lane operation's request body: protocol version, lane, this machine (and, with
        `claim`, its claim), and every given field that is not None."""
        body: dict[str, Any] = {
            "protocolVersion": P.PROTOCOL_VERSION,
            "lane": lane,
            "machineId": self.machine_id,
        }
        if claim and self.claim_id is not None:
            body["claimId"] = self.claim_id
        body.update({k: v for k, v in fields.items() if v is not None})
        return body

    # ------------------------------------------------------------------ how a body is answered

    @abstractmethod
    async def _send(self, op: str, lane: str, body: dict[str, Any], reply: type[R]) -> R:
        """Answer the request `body` of operation `op` (the endpoint's last path part)."""

    @abstractmethod
    async def _await(self, lane: str, body: dict[str, Any]) -> LaneReply:
        """The long poll: answer once the ticket leaves `queued` or waitSeconds pass."""

    @abstractmethod
    async def _receipt(self, lane: str, body: dict[str, Any]) -> ReceiptReply:
        """Store (or, where there are no receipts, only check) one receipt."""

    async def _release(self, lane: str, body: dict[str, Any]) -> ReleaseReply:
        return await self._send("release", lane, body, ReleaseReply)

    async def _status(self, lane: str, body: dict[str, Any]) -> StatusReply:
        return await self._send("status", lane, body, StatusReply)

    # ------------------------------------------------- lane operations (docs/protocol.md#http-api)

    async def acquire(
        self,
        lane: str,
        project: str,
        scene: str,
        prompt_hash: str,
        lease_seconds: float | None = None,
    ) -> LaneReply:
        body = self._body(
            lane, project=project, scene=scene, promptHash=prompt_hash, leaseSeconds=lease_seconds
        )
        return await self._send("acquire", lane, body, LaneReply)

    async def await_ticket(
        self, lane: str, ticket_id: str, wait_seconds: float = P.DEFAULT_AWAIT_SECONDS
    ) -> LaneReply:
        """Wait (at most `wait_seconds`) until the ticket is no longer queued or the pause
        starts, ends or changes (docs/protocol.md#await)."""
        return await self._await(
            lane, self._body(lane, ticketId=ticket_id, waitSeconds=wait_seconds)
        )

    async def heartbeat(
        self, lane: str, ticket_id: str, lease_seconds: float | None = None
    ) -> HeartbeatReply:
        body = self._body(lane, ticketId=ticket_id, leaseSeconds=lease_seconds)
        return await self._send("heartbeat", lane, body, HeartbeatReply)

    async def release(
        self,
        lane: str,
        ticket_id: str,
        outcome: str | None = None,
        provider_job_id: str | None = None,
        note: str | None = None,
    ) -> ReleaseReply:
        """End the ticket. When an earlier attempt of this call may have been applied (its
        reply was lost) and the repeat finds the ticket done with exactly this `outcome`, the
        reply is the applied release's: `released: true` (its `promoted` list was in the lost
        reply, so it is empty here)."""
        body = self._body(
            lane, ticketId=ticket_id, outcome=outcome, providerJobId=provider_job_id, note=note
        )
        return await self._release(lane, body)

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
        `receipt_id` overrides the derived id (used to prove the 409 conflict). The id is fixed
        before the first attempt, so a retried attempt is the same receipt (stored once; the
        repeat answers 200 `replay: true` when the first attempt was applied). The local queue
        keeps no receipts: it checks the receipt like the coordinator and stores nothing."""
        rid, sent, _ = receipt_fields(ticket_id, phase, payload, content_hash, receipt_id)
        body = self._body(
            lane,
            ticketId=ticket_id,
            receiptId=rid,
            phase=phase,
            payload=payload,
            contentHash=sent,
        )
        reply = await self._receipt(lane, body)
        reply.receipt_id, reply.content_hash = rid, sent
        return reply

    async def cooldown(
        self,
        lane: str,
        ticket_id: str,
        retry_after_seconds: float,
        reason_code: str = DEFAULT_COOLDOWN_REASON,
    ) -> CooldownReply:
        body = self._body(
            lane, ticketId=ticket_id, reasonCode=reason_code, retryAfterSeconds=retry_after_seconds
        )
        return await self._send("cooldown", lane, body, CooldownReply)

    async def reconcile(
        self,
        lane: str,
        ticket_id: str,
        outcome: str,
        provider_job_id: str | None = None,
        note: str | None = None,
    ) -> ReconcileReply:
        """End the in-flight job of an ended ticket of this machine: how its provider job
        ended (`completed`, `failed`, `not-found`), docs/protocol.md#reconcile. 409
        `not-in-flight` (NotInFlightError) when the ticket holds no in-flight slot."""
        body = self._body(
            lane, ticketId=ticket_id, outcome=outcome, providerJobId=provider_job_id, note=note
        )
        return await self._send("reconcile", lane, body, ReconcileReply)

    async def status(self, lane: str, include_receipts: bool = False) -> StatusReply:
        body = self._body(lane, claim=False, includeReceipts=include_receipts)
        return await self._status(lane, body)

    async def history(
        self, lane: str, limit: int = P.DEFAULT_HISTORY_LIMIT, project: str | None = None
    ) -> HistoryReply:
        body = self._body(lane, claim=False, limit=limit, project=project)
        return await self._send("history", lane, body, HistoryReply)
