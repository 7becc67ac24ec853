"""The old import path of the receipt helpers and the payload checker, kept working: they
moved to `client.driver.receipts` (the driver package). New code imports from there or from
`client.driver`."""

from client.driver.receipts import (
    LEASE_ACQUIRED,
    PHASES,
    PROVIDER_SUBMITTED,
    PROVIDER_TERMINAL,
    REFERENCES_APPLIED,
    TERMINAL_STATUSES,
    DroppedReceipt,
    Receipts,
    WrittenReceipt,
    check_payload,
    content_hash,
    hash_bytes,
    hash_file,
    lease_acquired_payload,
    looks_token_like,
    provider_submitted_payload,
    provider_terminal_payload,
    receipt_id,
    references_applied_payload,
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
    "check_payload",
    "content_hash",
    "hash_bytes",
    "hash_file",
    "lease_acquired_payload",
    "looks_token_like",
    "provider_submitted_payload",
    "provider_terminal_payload",
    "receipt_id",
    "references_applied_payload",
]
