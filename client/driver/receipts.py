"""Receipts for a driver (docs/protocol.md#receipts, docs/protocol.md#driver-rules): the four
phases, payload builders, a payload checker that refuses anything that looks like a prompt, a file
path, a token or an account name, and a writer that never lets a receipt stop a render.

    r = Receipts(backend, lane, ticket_id)
    await r.references_applied([hash_file(p) for p in refs])    # hashes, never the paths
    await r.provider_submitted(job_id)

Ids and hashes are the coordinator's own functions (`coordinator.protocol.receipts`): the
content hash is `sha256:<hex>` over the payload's RFC 8785 (JCS) canonical JSON and the id
is `<ticketId>:<phase>:<first 16 hex of the hash>`, so the same facts are the same receipt
however often they are written.

The payload checker (`check_payload`, client/driver/payload_check.py) runs on every payload
before anything is sent: a payload that looks like it holds a prompt, a file path, a token or an
account name is a `ValueError` (the rules are listed in docs/driver-guide.md, "Receipts").


Writing (`Receipts.write`): the local queue keeps no receipts, so there it is a no-op (the
checker still runs, so a bad payload fails on a developer's machine too). On the shared
coordinator a refused write (any 4xx, e.g. 403 not-holder or 409 receipt-conflict), an
unreachable or timed-out coordinator, a 5xx or a malformed answer — and, under
LANE_REQUIRED=1, the PreProviderError those become — is logged as a warning, recorded in
`dropped`, and the call returns None. It never raises for those: receipts are evidence, never a
condition (docs/protocol.md#driver-rules).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from client.api import LOCAL_KIND
from client.driver.payload_check import SHA256_RE, check_payload
from client.errors import LaneClientError
from client.models import ReceiptReply
from coordinator.protocol.errors import LaneError
from coordinator.protocol.receipts import canonical_json
from coordinator.protocol.receipts import content_hash as _hash_canonical
from coordinator.protocol.receipts import receipt_id_for as _receipt_id_for

if TYPE_CHECKING:
    from client.api import LaneBackend

log = logging.getLogger("lane.receipts")

LEASE_ACQUIRED: Final = "lease-acquired"
REFERENCES_APPLIED: Final = "references-applied"
PROVIDER_SUBMITTED: Final = "provider-submitted"
PROVIDER_TERMINAL: Final = "provider-terminal"
PHASES: Final = (LEASE_ACQUIRED, REFERENCES_APPLIED, PROVIDER_SUBMITTED, PROVIDER_TERMINAL)

#: How a provider job can end, as written in a provider-terminal receipt.
TERMINAL_STATUSES: Final = frozenset(
    {"completed", "failed", "timeout", "cancelled", "submit-failed", "not-submitted",
     "lease-lost"}
)  # fmt: skip


# ---------------------------------------------------------------- hashing and ids


def content_hash(payload: Mapping[str, Any]) -> str:
    """`sha256:<hex>` of the payload's RFC 8785 canonical JSON (what the coordinator checks)."""
    try:
        return _hash_canonical(canonical_json(dict(payload)))
    except LaneError as exc:
        raise ValueError(exc.message) from None


def receipt_id(ticket_id: str, phase: str, payload_or_hash: Mapping[str, Any] | str) -> str:
    """`<ticketId>:<phase>:<first 16 hex of the content hash>`."""
    if phase not in PHASES:
        raise ValueError(f"phase: must be one of {', '.join(PHASES)}")
    h = payload_or_hash if isinstance(payload_or_hash, str) else content_hash(payload_or_hash)
    if not SHA256_RE.fullmatch(h):
        raise ValueError("contentHash: must be sha256:<64 lowercase hex>")
    return _receipt_id_for(ticket_id, phase, h)


def hash_bytes(data: bytes) -> str:
    """`sha256:<hex>` of raw bytes (a reference image, an output video)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def hash_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """`sha256:<hex>` of a file's bytes, read locally. The path itself never goes anywhere."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return "sha256:" + h.hexdigest()


# ---------------------------------------------------------------- payload builders


def _hashes(values: Iterable[str], what: str) -> list[str]:
    out = []
    for v in values:
        if not isinstance(v, str) or not SHA256_RE.fullmatch(v):
            raise ValueError(f"{what}: every entry must be sha256:<64 lowercase hex>")
        out.append(v)
    return out


def _count(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}: must be a non-negative integer")
    return value


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def lease_acquired_payload(
    *,
    prompt_hash: str,
    fence: int | None,
    lease_seconds: float | None = None,
    scene_count: int | None = None,
    attempt: int | None = None,
) -> dict[str, Any]:
    """The request hash the ticket was granted for, its fence and lease length."""
    return _drop_none(
        {
            "promptHash": prompt_hash,
            "fence": fence,
            "leaseSeconds": lease_seconds,
            "sceneCount": _count(scene_count, "scene_count"),
            "attempt": _count(attempt, "attempt"),
        }
    )


def references_applied_payload(
    reference_hashes: Sequence[str],
    *,
    required_slots: int | None = None,
    provider_media_ids: Sequence[str] = (),
) -> dict[str, Any]:
    """The sha256 of each reference, in slot order, measured before the submit."""
    hashes = _hashes(reference_hashes, "reference_hashes")
    return _drop_none(
        {
            "referenceHashes": hashes,
            "referenceCount": len(hashes),
            "requiredSlots": _count(required_slots, "required_slots"),
            "providerMediaIds": list(provider_media_ids) or None,
        }
    )


def provider_submitted_payload(
    provider_job_id: str, *, attempt: int | None = None, request_hash: str | None = None
) -> dict[str, Any]:
    """The provider's job id (and optionally the hash of the exact request body sent)."""
    if not provider_job_id:
        raise ValueError("provider_job_id: required")
    if request_hash is not None:
        _hashes([request_hash], "request_hash")
    return _drop_none(
        {
            "providerJobId": provider_job_id,
            "attempt": _count(attempt, "attempt"),
            "requestHash": request_hash,
        }
    )


def provider_terminal_payload(
    provider_job_id: str | None,
    status: str,
    *,
    output_hashes: Sequence[str] = (),
    output_count: int | None = None,
) -> dict[str, Any]:
    """How the provider job ended, and the sha256 of what it produced."""
    if status not in TERMINAL_STATUSES:
        raise ValueError(f"status: must be one of {', '.join(sorted(TERMINAL_STATUSES))}")
    hashes = _hashes(output_hashes, "output_hashes")
    return _drop_none(
        {
            "providerJobId": provider_job_id,
            "status": status,
            "outputHashes": hashes or None,
            "outputCount": _count(output_count, "output_count")
            if output_count is not None
            else (len(hashes) if hashes else None),
        }
    )


# ---------------------------------------------------------------- the writer


@dataclass(frozen=True, slots=True)
class WrittenReceipt:
    phase: str
    receipt_id: str
    content_hash: str
    stored: bool
    replay: bool
    content_hash_verified: bool | None


@dataclass(frozen=True, slots=True)
class DroppedReceipt:
    phase: str
    receipt_id: str
    reason: str  # the error code and status, never the payload


@dataclass
class Receipts:
    """Writes one ticket's receipts; refused or unreachable writes are dropped (logged)."""

    backend: LaneBackend
    lane: str
    ticket_id: str
    written: list[WrittenReceipt] = field(default_factory=list)
    dropped: list[DroppedReceipt] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        """False on the local queue (it keeps no receipts)."""
        return self.backend.kind != LOCAL_KIND

    async def write(self, phase: str, payload: Mapping[str, Any]) -> ReceiptReply | None:
        """Check, then send one receipt. ValueError for a bad phase or payload (nothing is
        sent); None when it was dropped or the backend keeps no receipts."""
        if phase not in PHASES:
            raise ValueError(f"phase: must be one of {', '.join(PHASES)}")
        body = dict(payload)
        check_payload(body, lane=self.lane)
        rid = receipt_id(self.ticket_id, phase, body)
        if not self.enabled:
            return None
        try:
            reply = await self.backend.receipt(self.lane, self.ticket_id, phase, body)
        except LaneClientError as exc:
            reason = f"{exc.code} (HTTP {exc.status})" if exc.status else exc.code
            self.dropped.append(DroppedReceipt(phase, rid, reason))
            log.warning(
                "receipt %s dropped (%s): receipts are evidence, the render goes on", rid, reason
            )
            return None
        self.written.append(
            WrittenReceipt(
                phase,
                reply.receipt_id or rid,
                reply.content_hash,
                reply.stored,
                reply.replay,
                reply.content_hash_verified,
            )
        )
        if reply.content_hash_verified is False:
            log.warning("receipt %s stored but its content hash was not verified", rid)
        return reply

    async def lease_acquired(
        self,
        *,
        prompt_hash: str,
        fence: int | None,
        lease_seconds: float | None = None,
        scene_count: int | None = None,
        attempt: int | None = None,
    ) -> ReceiptReply | None:
        return await self.write(
            LEASE_ACQUIRED,
            lease_acquired_payload(
                prompt_hash=prompt_hash,
                fence=fence,
                lease_seconds=lease_seconds,
                scene_count=scene_count,
                attempt=attempt,
            ),
        )

    async def references_applied(
        self,
        reference_hashes: Sequence[str],
        *,
        required_slots: int | None = None,
        provider_media_ids: Sequence[str] = (),
    ) -> ReceiptReply | None:
        return await self.write(
            REFERENCES_APPLIED,
            references_applied_payload(
                reference_hashes,
                required_slots=required_slots,
                provider_media_ids=provider_media_ids,
            ),
        )

    async def provider_submitted(
        self, provider_job_id: str, *, attempt: int | None = None, request_hash: str | None = None
    ) -> ReceiptReply | None:
        return await self.write(
            PROVIDER_SUBMITTED,
            provider_submitted_payload(provider_job_id, attempt=attempt, request_hash=request_hash),
        )

    async def provider_terminal(
        self,
        provider_job_id: str | None,
        status: str,
        *,
        output_hashes: Sequence[str] = (),
        output_count: int | None = None,
    ) -> ReceiptReply | None:
        return await self.write(
            PROVIDER_TERMINAL,
            provider_terminal_payload(
                provider_job_id, status, output_hashes=output_hashes, output_count=output_count
            ),
        )


__all__ = [
    "LEASE_ACQUIRED",
    "PHASES",
    "PROVIDER_SUBMITTED",
    "PROVIDER_TERMINAL",
    "REFERENCES_APPLIED",
    "TERMINAL_STATUSES",
    "DroppedReceipt",
    "Receipts",
    "WrittenReceipt",
    "content_hash",
    "hash_bytes",
    "hash_file",
    "lease_acquired_payload",
    "provider_submitted_payload",
    "provider_terminal_payload",
    "receipt_id",
    "references_applied_payload",
]
