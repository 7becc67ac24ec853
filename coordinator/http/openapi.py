"""The OpenAPI 3.1 document, generated from the protocol Structs the server speaks.

Request bodies (`coordinator.protocol.requests`), the GET reads' query parameters
(`coordinator.protocol.queries`) and every reply and error body (`coordinator.protocol.replies`)
come from msgspec's JSON Schema of those Structs (coordinator/http/openapi_schemas.py adds what
the Structs cannot say), so the document cannot drift from what the server validates and
encodes. What is written here by hand is only what has no Struct: each route's summary and
which statuses it can answer. Every GET path also answers HEAD (aiohttp serves it: the GET's
status and headers, no body), and every path answers another method 405 with `Allow`; the
document declares both. `tests/ops/test_openapi.py` checks the document against the router,
`tests/ops/test_openapi_tools.py` with Redocly CLI and ajv (tools/openapi), and
`tests/ops/test_schemathesis.py` a running server against it.

Print it: `python -m coordinator.http.openapi`.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import msgspec

from coordinator import __version__
from coordinator.constants import DEFAULT_MAX_BODY_BYTES, MACHINE_ONLINE_SECONDS, MIN_TOKEN_BYTES
from coordinator.http.assets import CONTROL_ROOM_ASSETS
from coordinator.http.openapi_errors import (
    COMMON_ERRORS,
    EXTRA_ERRORS,
    FORBIDDEN,
    GET_ALLOW,
    POST_ALLOW,
    body_reply,
    error_responses,
    json_reply,
)
from coordinator.http.openapi_schemas import REF, component_schemas
from coordinator.protocol import constants as C
from coordinator.protocol import queries as Q
from coordinator.protocol import replies as wire
from coordinator.protocol import requests as S

BEARER = "bearerAuth"

_SUMMARIES = {
    "acquire": "Deduplicate, enqueue and fill capacity",
    "await": "Long poll until the ticket is no longer queued or the pause changes",
    "heartbeat": "Extend a held lease; queued: waiter keep-alive",
    "release": "End a ticket with an outcome and promote the next waiters",
    "receipt": "Record an evidence receipt, hash recomputed with RFC 8785",
    "status": "Reap, promote, then the lane's held and queued tickets",
    "history": "The render log, newest first",
    "cooldown": "Pause the lane on a provider human check",
    "reconcile": "End an ended ticket's in-flight provider job and promote the next waiters",
}

# Each POST operation's reply, by its success status.
_REPLIES: dict[str, dict[int, tuple[type[wire.Wire], str]]] = {
    "acquire": {200: (wire.LaneReply, "the ticket: new, or the live one of that identity")},
    "await": {200: (wire.LaneReply, "the ticket once it is no longer queued, or at the timeout")},
    "heartbeat": {200: (wire.HeartbeatReply, "refreshed, or why not (`reason`)")},
    "release": {200: (wire.ReleaseReply, "released, or why not (`reason`)")},
    "receipt": {
        201: (wire.ReceiptReply, "stored: a new receipt"),
        200: (wire.ReceiptReply, "not stored: a replay, or an unenforced lane"),
    },
    "status": {200: (wire.StatusReply, "the lane's held and queued tickets")},
    "history": {200: (wire.HistoryReply, "the render log")},
    "cooldown": {200: (wire.CooldownReply, "the lane's pause")},
    "reconcile": {200: (wire.ReconcileReply, "the hold ended; the waiters it promoted")},
}


def _get(
    operation_id: str, summary: str, security: list[Any], responses: dict[str, Any]
) -> dict[str, Any]:
    """A public path or /metrics (GET, and HEAD beside it)."""
    return {
        "operationId": operation_id,
        "summary": summary,
        "security": security,
        "responses": responses,
    }


def _head(get: dict[str, Any]) -> dict[str, Any]:
    """HEAD beside a GET (aiohttp serves it): the GET's statuses and headers, no body."""
    responses = {
        status: {
            "description": f"{r['description']} (headers only)",
            **({"headers": r["headers"]} if "headers" in r else {}),
        }
        for status, r in get["responses"].items()
    }
    head = {
        "operationId": f"{get['operationId']}_head",
        "summary": f"{get['summary']} (HEAD: the GET's status and headers, no body)",
        "security": get["security"],
        "responses": responses,
    }
    if get.get("parameters"):
        head["parameters"] = get["parameters"]
    return head


def _parameters(params: type[Q.Params]) -> list[dict[str, Any]]:
    """A GET read's query parameters, from its Struct: each field's schema (its bounds,
    default, pattern), its description, and whether it is required. A parameter that may be
    left out is never null: only the value's own schema is kept. An integer given empty
    (`name=`) takes its default, as `decode_query` reads it."""
    _, defs = msgspec.json.schema_components([params], ref_template=REF)
    struct = defs[params.__name__]
    required = set(struct.get("required", ()))
    out: list[dict[str, Any]] = []
    for name, prop in struct["properties"].items():
        schema = dict(prop)
        default = schema.pop("default", None)
        if "anyOf" in schema:
            [schema] = [dict(s) for s in schema["anyOf"] if s.get("type") != "null"]
        description = schema.pop("description")
        if default is not None:
            schema["default"] = default
        param = {
            "name": name,
            "in": "query",
            "required": name in required,
            "description": description,
            "schema": schema,
        }
        if schema["type"] == "integer":
            param["description"] = f"{description} (empty: {default})"
            param["allowEmptyValue"] = True
        out.append(param)
    return out


def _get_routes() -> dict[str, dict[str, Any]]:
    """GET routes: summary, query parameters, responses. Authenticated: /v1, /metrics."""
    return {
        "/v1/lanes": {
            "summary": "Every known lane: capacity, held/queued counts, pause",
            "parameters": [],
            "responses": {
                "200": json_reply("the lanes", wire.LanesReply),
                **error_responses((401, 503), GET_ALLOW),
            },
        },
        "/v1/incidents": {
            "summary": "Incidents, newest first, of one lane or all",
            "parameters": _parameters(Q.IncidentsParams),
            "responses": {
                "200": json_reply("the incidents", wire.IncidentsReply),
                **error_responses((400, 401, 503), GET_ALLOW),
            },
        },
        "/v1/machines": {
            "summary": (
                f"Machine presence: online for {MACHINE_ONLINE_SECONDS:g} s after its last "
                "authenticated call that named it"
            ),
            "parameters": [],
            "responses": {
                "200": json_reply("the machines", wire.MachinesReply),
                **error_responses((401, 503), GET_ALLOW),
            },
        },
        "/v1/evidence": {
            "summary": "Coordinator evidence of a lane and job evidence of one ticket",
            "parameters": _parameters(Q.EvidenceParams),
            "responses": {
                "200": json_reply("the evidence", wire.EvidenceReply),
                **error_responses((400, 401, 503), GET_ALLOW),
            },
        },
        "/v1/overview": {
            "summary": (
                "Every known lane in one bounded read (status, recent render log, receipts, "
                "projects), incidents, machines and the chosen render log: the control "
                "room's whole refresh, whatever the number of lanes"
            ),
            "parameters": _parameters(Q.OverviewParams),
            "responses": {
                "200": json_reply("the overview", wire.Overview),
                **error_responses((400, 401, 503), GET_ALLOW),
            },
        },
        "/v1/whoami": {
            "summary": (
                "The credential this request presented: its name, role and machine (never "
                "its secret); canWrite says whether its role may change lanes"
            ),
            "parameters": [],
            "responses": {
                "200": json_reply("the credential", wire.WhoamiReply),
                **error_responses((401,), GET_ALLOW),
            },
        },
        "/v1/dashboard": {
            "summary": "Redirect to the control-room page",
            "parameters": [],
            "responses": {
                "302": {
                    "description": "to /control-room (aiohttp's text body)",
                    "headers": {
                        "Location": {
                            "description": "the control-room page",
                            "required": True,
                            "schema": {"type": "string", "const": "/control-room"},
                        },
                    },
                    "content": {
                        "text/plain": {
                            "schema": {"type": "string", "examples": ["302: Found"]},
                        }
                    },
                },
                **error_responses((401,), GET_ALLOW),
            },
        },
    }


def _post_paths(auth: list[dict[str, list[str]]]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for name in sorted(S.SCHEMAS):
        schema = S.SCHEMAS[name]
        ok = {
            str(status): json_reply(text, reply) for status, (reply, text) in _REPLIES[name].items()
        }
        paths[f"/v1/lanes/{name}"] = {
            "post": {
                "operationId": f"lanes_{name}",
                "summary": _SUMMARIES[name],
                "security": auth,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": REF.format(name=schema.__name__)}}
                    },
                },
                "responses": {
                    **ok,
                    **error_responses(
                        COMMON_ERRORS + EXTRA_ERRORS[name], POST_ALLOW, forbidden=FORBIDDEN[name]
                    ),
                },
            }
        }
    return paths


def _public_paths(auth: list[dict[str, list[str]]]) -> dict[str, dict[str, Any]]:
    """The GET operations outside /v1: /metrics (bearer) and the public paths."""
    plain = wire.PlainErrorReply
    text = {"type": "string"}
    asset = {
        "name": "name",
        "in": "path",
        "required": True,
        "description": "one of the page's own files (a fixed list)",
        "schema": {"type": "string", "enum": sorted(CONTROL_ROOM_ASSETS)},
    }
    return {
        "/metrics": _get(
            "metrics",
            "Prometheus metrics (text exposition format)",
            auth,
            {
                "200": body_reply("metrics", "text/plain", text),
                **error_responses((401,), GET_ALLOW, plain),
            },
        ),
        "/healthz": _get(
            "healthz",
            "Liveness; public; no queue data",
            [],
            {
                "200": json_reply("alive", wire.Healthz),
                **error_responses((), GET_ALLOW, plain),
            },
        ),
        "/readyz": _get(
            "readyz",
            "Readiness; public; no queue data: 200 while the server can commit (the store "
            "is reachable, not shutting down), else 503 with why",
            [],
            {
                "200": json_reply("ready (brokenLanes: lanes that cannot be opened)", wire.Readyz),
                "503": json_reply(
                    "not ready: the message says why (shutting down, data dir not writable)",
                    plain,
                ),
                **error_responses((), GET_ALLOW, plain),
            },
        ),
        "/openapi.json": _get(
            "openapi",
            "This document; public (it describes the API, it holds no data)",
            [],
            {
                "200": body_reply(
                    "OpenAPI 3.1",
                    "application/json",
                    {"type": "object", "additionalProperties": True},
                ),
                **error_responses((), GET_ALLOW, plain),
            },
        ),
        "/control-room": _get(
            "control_room",
            "The read-only control-room page; it holds no data (unlocked by token)",
            [],
            {
                "200": body_reply("HTML", "text/html", text),
                **error_responses((), GET_ALLOW, plain),
            },
        ),
        "/control-room/assets/{name}": {
            **_get(
                "control_room_asset",
                "One of the control-room page's own scripts or its style sheet; public",
                [],
                {
                    "200": {
                        "description": "the file",
                        "content": {
                            "text/javascript": {"schema": text},
                            "text/css": {"schema": text},
                        },
                    },
                    "404": json_reply("not-found: no such asset", plain),
                    **error_responses((), GET_ALLOW, plain),
                },
            ),
            "parameters": [asset],
        },
        "/control-room/": _get(
            "control_room_slash",
            "The control-room page, also at this address (a link with a trailing slash)",
            [],
            {
                "200": body_reply("HTML", "text/html", text),
                **error_responses((), GET_ALLOW, plain),
            },
        ),
    }


@functools.cache
def openapi_document() -> dict[str, Any]:
    auth: list[dict[str, list[str]]] = [{BEARER: []}]
    paths: dict[str, Any] = _post_paths(auth)
    gets = {
        path: {"operationId": path.strip("/").replace("/", "_"), "security": auth, **op}
        for path, op in _get_routes().items()
    }
    gets.update(_public_paths(auth))
    for path, get in gets.items():
        paths[path] = {"get": get, "head": _head(get)}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "lane-coordinator",
            "version": __version__,
            "description": (
                "Lease coordinator for shared provider accounts. Every POST body carries "
                f"protocolVersion (supported: {list(C.SUPPORTED_PROTOCOLS)}; any other "
                "integer is 400 unsupported-protocol); unknown fields are ignored; bodies are "
                f"bounded by max_body_bytes (default {DEFAULT_MAX_BODY_BYTES} bytes). Every "
                "/v1 reply, errors included, names the coordinator that answered. A method a "
                "path does not serve is 405 method-not-allowed with an Allow header; every GET "
                "path answers HEAD too."
            ),
        },
        # Relative: the coordinator that serves this document (any host and port).
        "servers": [{"url": "/", "description": "the coordinator serving this document"}],
        "paths": paths,
        "components": {
            "schemas": component_schemas(),
            "securitySchemes": {
                BEARER: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": (
                        f"a coordinator token (at least {MIN_TOKEN_BYTES} bytes): a "
                        "credential whose role is reader (every GET under /v1, /metrics, "
                        "status, history), driver (also acquire, await, heartbeat, release, "
                        "receipt, cooldown, reconcile; bound to one machineId when it names "
                        "one) or admin (everything, for any machine); outside its role 403 "
                        "role-forbidden, another machine 403 machine-mismatch"
                    ),
                }
            },
        },
    }


@functools.cache
def openapi_bytes() -> bytes:
    return msgspec.json.encode(openapi_document())


if __name__ == "__main__":
    sys.stdout.write(msgspec.json.format(openapi_bytes().decode(), indent=2) + "\n")
