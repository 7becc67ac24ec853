"""Receipt ids and content hashes: defined in `coordinator.protocol.receipts` (the client
computes them too); importable from here."""

from __future__ import annotations

from coordinator.protocol.receipts import (
    HASH_RE,
    PHASES,
    RECEIPT_ID_RE,
    canonical_json,
    check_receipt_id,
    content_hash,
    receipt_id_for,
)

__all__ = [
    "HASH_RE",
    "PHASES",
    "RECEIPT_ID_RE",
    "canonical_json",
    "check_receipt_id",
    "content_hash",
    "receipt_id_for",
]
