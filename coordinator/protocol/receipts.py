"""Receipt ids and content hashes: RFC 8785 (JCS) canonical JSON, sha256.

Both sides compute these: the client to name and hash what it sends, the server to check the
id's shape and recompute the hash. The one third-party dependency of the protocol package
besides msgspec is `rfc8785` (the canonical form is part of the protocol).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, get_args

import rfc8785

from coordinator.protocol.errors import BadRequest
from coordinator.protocol.replies import ReceiptPhase

HASH_PATTERN = r"^sha256:[0-9a-f]{64}\Z"
HASH_RE = re.compile(HASH_PATTERN)
# The ticket part is everything before the last two parts (a ticket id may hold any character).
RECEIPT_ID_PATTERN = r"^[\s\S]+:[a-z-]+:[0-9a-f]{16}\Z"
RECEIPT_ID_RE = re.compile(
    r"^(?P<ticket>.+):(?P<phase>[a-z-]+):(?P<prefix>[0-9a-f]{16})\Z", re.DOTALL
)
PHASES: tuple[str, ...] = get_args(ReceiptPhase)


def canonical_json(payload: Any) -> bytes:
    """RFC 8785 canonical bytes, or 400 naming why the payload cannot be canonicalized."""
    try:
        return bytes(rfc8785.dumps(payload))
    except rfc8785.IntegerDomainError as exc:
        raise BadRequest(
            "payload: an integer is outside the range RFC 8785 can represent (±2^53-1)"
        ) from exc
    except rfc8785.FloatDomainError as exc:
        raise BadRequest("payload: a number is not finite (RFC 8785 has no NaN/Infinity)") from exc
    except rfc8785.CanonicalizationError as exc:
        raise BadRequest("payload: cannot be canonicalized as RFC 8785 JSON") from exc
    except RecursionError:
        raise BadRequest("payload: nested too deeply to canonicalize") from None


def content_hash(canonical: bytes) -> str:
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def receipt_id_for(ticket_id: str, phase: str, hash_: str) -> str:
    return f"{ticket_id}:{phase}:{hash_.removeprefix('sha256:')[:16]}"


def check_receipt_id(receipt_id: str, ticket_id: str, phase: str) -> None:
    """The id's shape must be <ticketId>:<phase>:<16 hex>, naming the body's ticket and phase."""
    m = RECEIPT_ID_RE.fullmatch(receipt_id)
    if m is None:
        raise BadRequest("receiptId: must be <ticketId>:<phase>:<first 16 hex of the hash>")
    if m.group("ticket") != ticket_id:
        raise BadRequest("receiptId: its ticket part must equal ticketId")
    if m.group("phase") != phase:
        raise BadRequest("receiptId: its phase part must equal phase")
