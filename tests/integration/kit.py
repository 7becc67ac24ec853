"""Helpers for the integration tests: request bodies and error checks (lane names of the
shared config come from tests.harness)."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

from tests.harness.config import DUO as DUO  # re-exported: the tests import lanes from here
from tests.harness.config import FREE as FREE
from tests.harness.config import SOLO as SOLO

ERROR_CODES = {
    "bad-request": 400,
    "unsupported-protocol": 400,
    "unauthorized": 401,
    "not-owner": 403,
    "not-holder": 403,
    "role-forbidden": 403,
    "machine-mismatch": 403,
    "not-found": 404,
    "method-not-allowed": 405,
    "ticket-not-held": 409,
    "receipt-conflict": 409,
    "not-in-flight": 409,
    "payload-too-large": 413,
    "unsupported-media-type": 415,
    "unavailable": 503,
}

TICKET_KEYS = {
    "ticketId",
    "lane",
    "state",
    "machineId",
    "claimId",
    "project",
    "scene",
    "promptHash",
    "position",
    "etaSeconds",
    "enqueuedAt",
    "heldAt",
    "leaseExpiresAt",
    "heartbeatAt",
    "fence",
}

PHASES = ("lease-acquired", "references-applied", "provider-submitted", "provider-terminal")


def acquire_body(
    lane: str = SOLO,
    machine: str = "mA",
    claim: str | None = "cA",
    project: str = "p1",
    scene: str = "s1",
    prompt: str = "h1",
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "lane": lane,
        "machineId": machine,
        "project": project,
        "scene": scene,
        "promptHash": prompt,
        **extra,
    }
    if claim is not None:
        body["claimId"] = claim
    return body


def ticket_body(
    lane: str, ticket_id: str, machine: str = "mA", claim: str | None = "cA", **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"lane": lane, "machineId": machine, "ticketId": ticket_id, **extra}
    if claim is not None:
        body["claimId"] = claim
    return body


def jcs_hash(payload: Any) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(payload)).hexdigest()


def receipt_body(
    lane: str,
    ticket_id: str,
    phase: str = "lease-acquired",
    payload: Any = None,
    machine: str = "mA",
    claim: str | None = "cA",
    content_hash: str | None = None,
    receipt_id: str | None = None,
) -> dict[str, Any]:
    payload = {"n": 1} if payload is None else payload
    h = content_hash or jcs_hash(payload)
    rid = receipt_id or f"{ticket_id}:{phase}:{h.removeprefix('sha256:')[:16]}"
    return ticket_body(
        lane,
        ticket_id,
        machine,
        claim,
        receiptId=rid,
        phase=phase,
        payload=payload,
        contentHash=h,
    )


def assert_error(r: Any, status: int, code: str, field_name: str | None = None) -> None:
    """The protocol's error shape with this status and code; the message names `field_name`."""
    assert r.status == status, (r.status, r.text)
    # Under /v1 an error carries `coordinator` like every /v1 reply (docs/protocol.md#http-api);
    # nothing else.
    assert isinstance(r.body, dict) and set(r.body) - {"coordinator"} == {"error"}, r.text
    assert r.body.get("coordinator", "actor-sqlite") == "actor-sqlite", r.text
    assert r.code == code, r.text
    assert ERROR_CODES[code] == status
    assert isinstance(r.body["error"]["message"], str) and r.body["error"]["message"]
    if field_name is not None:
        assert field_name in r.message, (field_name, r.message)
    assert "Traceback" not in r.text
