"""Schemathesis hooks for the coordinator's OpenAPI document (loaded by schemathesis.toml).

One protocol rule is beyond JSON Schema: a receipt's `receiptId` is
`<ticketId>:<phase>:<16 hex>`, and its ticket and phase parts must be the body's own
`ticketId` and `phase` (any other id is 400 bad-request, by design: an id naming another
ticket would take that ticket's receipt slot). The document states it in the field's
description and pattern; this hook teaches the generator the same rule, so a body schemathesis
generates as valid is valid. Invalid bodies (negative mode) are left untouched.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from schemathesis import Case
from schemathesis.hooks import HookContext

from coordinator.protocol.receipts import HASH_RE, PHASES, receipt_id_for

RECEIPT_PATH = "/v1/lanes/receipt"


@schemathesis.hook
def before_call(context: HookContext, case: Case[Any], kwargs: dict[str, Any]) -> None:
    """Just before a request goes out (every phase; stateful links are applied by then)."""
    if case.operation.path != RECEIPT_PATH or not isinstance(case.body, dict):
        return
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return
    body = case.body
    ticket, phase, sent = body.get("ticketId"), body.get("phase"), body.get("contentHash")
    if not isinstance(ticket, str) or phase not in PHASES or not isinstance(sent, str):
        return
    if HASH_RE.fullmatch(sent) and "receiptId" in body:
        body["receiptId"] = receipt_id_for(ticket, str(phase), sent)
