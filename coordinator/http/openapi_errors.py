"""The OpenAPI document's replies that are no route's own: the error bodies each operation can
answer (which statuses, the 403's codes per operation, the 401's and 405's headers) and the
reply objects (`json_reply`, `body_reply`). coordinator/http/openapi.py builds the paths."""

from __future__ import annotations

from typing import Any

from coordinator.http.openapi_schemas import REF
from coordinator.protocol import replies as wire

POST_ALLOW = "POST"  # what a POST path's 405 names
GET_ALLOW = "GET, HEAD"  # ... and a GET path's (aiohttp serves HEAD beside every GET)

# Every POST operation can answer these: a bad body or protocolVersion, no token, a credential
# bound to another machine than the body's machineId (403 machine-mismatch), a body over
# max_body_bytes, a body that is not JSON, a change that could not be committed.
COMMON_ERRORS = (400, 401, 403, 413, 415, 503)
# ...and these, about the ticket it names.
EXTRA_ERRORS: dict[str, tuple[int, ...]] = {
    "acquire": (),
    "await": (404,),
    "heartbeat": (404,),
    "release": (404,),
    "receipt": (404, 409),
    "status": (),
    "history": (),
    "cooldown": (404, 409),
    "reconcile": (404, 409),
}
# The 403 codes of each POST operation (docs/protocol.md#credentials): every one may be
# machine-mismatch; a write is role-forbidden to a reader credential; the ticket's own.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "acquire": ("role-forbidden", "machine-mismatch"),
    "await": ("role-forbidden", "machine-mismatch", "not-owner"),
    "heartbeat": ("role-forbidden", "machine-mismatch"),
    "release": ("role-forbidden", "machine-mismatch"),
    "receipt": ("role-forbidden", "machine-mismatch", "not-holder"),
    "status": ("machine-mismatch",),
    "history": ("machine-mismatch",),
    "cooldown": ("role-forbidden", "machine-mismatch", "not-owner"),
    "reconcile": ("role-forbidden", "machine-mismatch", "not-owner"),
}
FORBIDDEN_TEXT = {
    "role-forbidden": "role-forbidden (the credential's role does not include this call: a "
    "reader credential writes nothing)",
    "machine-mismatch": "machine-mismatch (a credential bound to one machine named another "
    "machineId)",
    "not-owner": "not-owner (another driver owns the ticket)",
    "not-holder": "not-holder (the writer is not the ticket's holder machine)",
}

ERROR_TEXT = {
    400: "bad-request or unsupported-protocol (the message names the field)",
    401: "unauthorized: a valid bearer token is required",
    403: "role-forbidden, machine-mismatch, not-owner or not-holder",
    404: "not-found",
    405: "method-not-allowed: the Allow header names the accepted methods",
    409: "ticket-not-held, receipt-conflict or not-in-flight",
    413: "payload-too-large",
    415: "unsupported-media-type",
    503: "unavailable (nothing was applied; retry)",
}

WWW_AUTHENTICATE = {
    "WWW-Authenticate": {
        "description": 'the scheme to use: Bearer realm="lane-coordinator"',
        "required": True,
        "schema": {"type": "string", "const": 'Bearer realm="lane-coordinator"'},
    }
}


def allow_header(methods: str) -> dict[str, Any]:
    return {
        "Allow": {
            "description": "the methods the path accepts",
            "required": True,
            "schema": {"type": "string", "const": methods},
        }
    }


def json_reply(description: str, reply: type[wire.Wire]) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": REF.format(name=reply.__name__)}}},
    }


def body_reply(description: str, media_type: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A reply that is no protocol Struct: its media type and JSON Schema."""
    return {"description": description, "content": {media_type: {"schema": schema}}}


READ_400 = "bad-request (the message names the query parameter)"  # GET: no protocolVersion


def error_responses(
    statuses: tuple[int, ...],
    allow: str,
    error: type[wire.Wire] = wire.ErrorReply,
    *,
    forbidden: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The error replies of an operation: `statuses` and 405 (another method: `allow`).
    `error`: ErrorReply under /v1 (it names the coordinator), PlainErrorReply outside;
    `forbidden`: the 403's codes, each described."""
    out: dict[str, Any] = {}
    for code in sorted({*statuses, 405}):
        text = READ_400 if code == 400 and allow == GET_ALLOW else ERROR_TEXT[code]
        if code == 403 and forbidden:
            text = "; ".join(FORBIDDEN_TEXT[c] for c in forbidden)
        response = json_reply(text, error)
        if code == 401:
            response["headers"] = WWW_AUTHENTICATE
        if code == 405:
            response["headers"] = allow_header(allow)
        out[str(code)] = response
    return out
