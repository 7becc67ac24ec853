"""The OpenAPI 3.1 document, generated from the msgspec schemas the server validates with.

Request bodies come from `coordinator.http.schemas.SCHEMAS` through
`msgspec.json.schema_components`, so the document cannot drift from what the server
accepts. The error shape comes from `coordinator.errors` (every SPEC error code).
What is written here by hand is only what has no schema class: each route's summary,
its query parameters (limits taken from `constants`) and which error statuses it can
answer. `tests/ops/test_openapi.py` checks the document against the router.

Print it: `python -m coordinator.http.openapi`.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Literal

import msgspec

from coordinator import __version__
from coordinator import constants as C
from coordinator.errors import LaneError
from coordinator.http import schemas as S
from coordinator.names import LANE_RE

REF = "#/components/schemas/{name}"
BEARER = "bearerAuth"


class ErrorDetail(msgspec.Struct, kw_only=True):
    code: str
    message: str
    supported: list[int] | None = None  # unsupported-protocol only


class ErrorBody(msgspec.Struct, kw_only=True):
    error: ErrorDetail


class V1Reply(msgspec.Struct, kw_only=True):
    """Every /v1 JSON reply; the rest of each reply is described in docs/protocol.md."""

    coordinator: Literal["actor-sqlite"]


class Health(msgspec.Struct, kw_only=True):
    ok: bool


# ---- GET /v1/overview's reply, field by field (tests decode real replies with these)


class _Wire(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    pass


class Ticket(_Wire):
    """A ticket, as every reply shows it (null where not applicable)."""

    ticket_id: str
    lane: str
    state: Literal["queued", "held", "done", "expired"]
    machine_id: str | None
    claim_id: str | None
    project: str | None
    scene: str | None
    prompt_hash: str | None
    position: int | None
    eta_seconds: float | None
    enqueued_at: float | None
    held_at: float | None
    lease_expires_at: float | None
    heartbeat_at: float | None
    fence: int | None


class Pause(_Wire):
    """An active provider cooldown of the lane."""

    reason_code: str
    started_at: float
    until: float
    machine_id: str
    claim_id: str | None
    ticket_id: str


class HistoryEntry(_Wire):
    """A render-log row: a ticket that reached done or expired."""

    ticket_id: str
    project: str
    scene: str
    prompt_hash: str
    machine_id: str
    claim_id: str | None
    outcome: str | None
    late_outcome: str | None
    provider_job_id: str | None
    note: str | None
    enqueued_at: float
    held_at: float | None
    ended_at: float | None
    wait_seconds: float | None
    hold_seconds: float | None
    fence: int | None


class LogEntry(HistoryEntry):
    """A render-log row of the overview's merged log: it names its lane."""

    lane: str


class LaneHistory(_Wire):
    """The lane's newest render-log rows (at most `history`) and how many it keeps."""

    entries: list[HistoryEntry]
    retained: int


class ReceiptSummary(_Wire):
    """A receipt without its payload (GET /v1/evidence shows a ticket's payloads)."""

    receipt_id: str
    ticket_id: str
    phase: str
    machine_id: str
    content_hash: str
    content_hash_verified: bool | None
    created_at: float


class IncidentRow(_Wire):
    id: int
    lane: str
    kind: str
    at: float
    ticket_id: str | None
    machine_id: str | None
    detail: dict[str, Any]


class MachineRow(_Wire):
    machine_id: str
    last_seen_at: float
    online: bool
    seconds_since_seen: float
    lanes: list[str]


class OverviewLane(_Wire):
    """One known lane: its status (held, queued in promotion order) and bounded reads."""

    lane: str
    enforced: bool
    capacity: int | None
    held: list[Ticket]
    queued: list[Ticket]
    queued_total: int
    pause: Pause | None
    now: float
    history: LaneHistory
    recent_receipts: list[ReceiptSummary]
    receipt_mismatches: list[ReceiptSummary]
    projects: list[str]


class OverviewLog(_Wire):
    """The render log of `lane` (every lane when null), filtered by `project`, newest first;
    `counts` is over these rows, `retained` over the lanes it covers."""

    lane: str | None
    project: str | None
    entries: list[LogEntry]
    counts: dict[str, int]
    retained: int
    retained_limit: int


class OverviewLimits(_Wire):
    """The limits this reply was read with (the query's, or their defaults)."""

    history: int
    queued: int
    receipts: int
    incidents: int
    limit: int


class Overview(_Wire):
    """The control room's whole periodic refresh in one bounded read."""

    coordinator: Literal["actor-sqlite"]
    now: float
    limits: OverviewLimits
    lanes: list[OverviewLane]
    incidents: list[IncidentRow]
    machines: list[MachineRow]
    log: OverviewLog


def _error_codes() -> list[str]:
    codes: set[str] = set()
    todo: list[type[LaneError]] = [LaneError]
    while todo:
        cls = todo.pop()
        codes.add(cls.code)
        todo.extend(cls.__subclasses__())
    return sorted(codes)


_SUMMARIES = {
    "acquire": "Deduplicate, enqueue and fill capacity",
    "await": "Long poll until the ticket is no longer queued or the pause changes",
    "heartbeat": "Extend a held lease; queued: waiter keep-alive",
    "release": "End a ticket with an outcome and promote the next waiters",
    "receipt": "Record an evidence receipt, hash recomputed with RFC 8785",
    "status": "Reap, promote, then the lane's held and queued tickets",
    "history": "The render log, newest first",
    "cooldown": "Pause the lane on a provider human check",
}

# Error statuses each operation can answer besides 400, 401, 413, 415 and 503.
_EXTRA_ERRORS: dict[str, tuple[int, ...]] = {
    "acquire": (),
    "await": (403, 404),
    "heartbeat": (404,),
    "release": (404,),
    "receipt": (403, 404, 409),
    "status": (),
    "history": (),
    "cooldown": (403, 404, 409),
}
_COMMON_ERRORS = (400, 401, 413, 415, 503)

_ERROR_TEXT = {
    400: "bad-request or unsupported-protocol (the message names the field)",
    401: "unauthorized: a valid bearer token is required",
    403: "not-owner or not-holder",
    404: "not-found",
    409: "ticket-not-held or receipt-conflict",
    413: "payload-too-large",
    415: "unsupported-media-type",
    503: "unavailable (nothing was applied; retry)",
}


def _error_responses(statuses: tuple[int, ...]) -> dict[str, Any]:
    return {
        str(code): {
            "description": _ERROR_TEXT[code],
            "content": {"application/json": {"schema": {"$ref": REF.format(name="ErrorBody")}}},
        }
        for code in sorted(statuses)
    }


def _json_ok(description: str, schema: str = "V1Reply") -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": REF.format(name=schema)}}},
    }


def _query(name: str, schema: dict[str, Any], required: bool, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema,
    }


_LANE_QUERY = {"type": "string", "pattern": LANE_RE.pattern}


def _int_query(lo: int, hi: int, default: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": lo, "maximum": hi, "default": default}


def _get_routes() -> dict[str, dict[str, Any]]:
    """GET routes: (summary, query parameters, extra responses). Authenticated: /v1, /metrics."""
    v1_errors = _error_responses((400, 401, 503))
    return {
        "/v1/lanes": {
            "summary": "Every known lane: capacity, held/queued counts, pause",
            "parameters": [],
            "responses": {"200": _json_ok("the lanes"), **v1_errors},
        },
        "/v1/incidents": {
            "summary": "Incidents, newest first, of one lane or all",
            "parameters": [
                _query("lane", _LANE_QUERY, False, "one lane (route:account); all when absent"),
                _query(
                    "limit",
                    {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": C.MAX_INCIDENTS_LIMIT,
                        "default": C.DEFAULT_INCIDENTS_LIMIT,
                    },
                    False,
                    "at most this many rows",
                ),
            ],
            "responses": {"200": _json_ok("the incidents"), **v1_errors},
        },
        "/v1/machines": {
            "summary": (
                f"Machine presence: online for {C.MACHINE_ONLINE_SECONDS:g} s after its last "
                "authenticated call that named it"
            ),
            "parameters": [],
            "responses": {"200": _json_ok("the machines"), **v1_errors},
        },
        "/v1/evidence": {
            "summary": "Coordinator evidence of a lane and job evidence of one ticket",
            "parameters": [
                _query("lane", _LANE_QUERY, True, "the lane (route:account)"),
                _query("ticketId", {"type": "string"}, False, "the exact ticket"),
            ],
            "responses": {"200": _json_ok("the evidence"), **v1_errors},
        },
        "/v1/overview": {
            "summary": (
                "Every known lane in one bounded read (status, recent render log, receipts, "
                "projects), incidents, machines and the chosen render log: the control "
                "room's whole refresh, whatever the number of lanes"
            ),
            "parameters": [
                _query(
                    "history",
                    _int_query(0, C.OVERVIEW_MAX_HISTORY, C.OVERVIEW_DEFAULT_HISTORY),
                    False,
                    "render-log rows per lane, newest first (the timeline)",
                ),
                _query(
                    "queued",
                    _int_query(0, C.STATUS_QUEUED_LIMIT, C.OVERVIEW_DEFAULT_QUEUED),
                    False,
                    "queued tickets listed per lane, in promotion order (queuedTotal counts all)",
                ),
                _query(
                    "receipts",
                    _int_query(0, C.RECENT_RECEIPTS_LIMIT, C.OVERVIEW_DEFAULT_RECEIPTS),
                    False,
                    "newest receipts per lane, without payload; receiptMismatches lists "
                    f"every mismatch among the lane's newest {C.RECENT_RECEIPTS_LIMIT} anyway",
                ),
                _query(
                    "incidents",
                    _int_query(1, C.MAX_INCIDENTS_LIMIT, C.DEFAULT_INCIDENTS_LIMIT),
                    False,
                    "incidents of every lane, newest first",
                ),
                _query("lane", _LANE_QUERY, False, "the render log's lane; every lane when absent"),
                _query(
                    "project",
                    {"type": "string", "minLength": 1, "maxLength": C.MAX_IDENTITY_CHARS},
                    False,
                    "the render log's project filter",
                ),
                _query(
                    "limit",
                    _int_query(1, C.OVERVIEW_MAX_LOG_LIMIT, C.OVERVIEW_DEFAULT_LOG_LIMIT),
                    False,
                    "render-log rows in all (log.entries), newest first",
                ),
            ],
            "responses": {"200": _json_ok("the overview", "Overview"), **v1_errors},
        },
        "/v1/dashboard": {
            "summary": "Redirect to the control-room page",
            "parameters": [],
            "responses": {
                "302": {
                    "description": "to /control-room",
                    "headers": {"Location": {"schema": {"type": "string"}}},
                },
                **_error_responses((401,)),
            },
        },
    }


@functools.cache
def openapi_document() -> dict[str, Any]:
    bodies = [S.SCHEMAS[name] for name in sorted(S.SCHEMAS)]
    _, components = msgspec.json.schema_components(
        [*bodies, ErrorBody, V1Reply, Health, Overview], ref_template=REF
    )
    components["ErrorDetail"]["properties"]["code"]["enum"] = _error_codes()
    auth: list[dict[str, list[str]]] = [{BEARER: []}]
    paths: dict[str, Any] = {}
    for name in sorted(S.SCHEMAS):
        schema = S.SCHEMAS[name]
        ok: dict[str, Any] = {"200": _json_ok("the operation's reply")}
        if name == "receipt":
            ok = {
                "201": _json_ok("stored: a new receipt"),
                "200": _json_ok("not stored: a replay, or an unenforced lane"),
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
                    **_error_responses(_COMMON_ERRORS + _EXTRA_ERRORS[name]),
                },
            }
        }
    for path, op in _get_routes().items():
        paths[path] = {
            "get": {"operationId": path.strip("/").replace("/", "_"), "security": auth, **op}
        }
    paths["/metrics"] = {
        "get": {
            "operationId": "metrics",
            "summary": "Prometheus metrics (text exposition format)",
            "security": auth,
            "responses": {
                "200": {
                    "description": "metrics",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                **_error_responses((401,)),
            },
        }
    }
    paths["/healthz"] = {
        "get": {
            "operationId": "healthz",
            "summary": "Liveness; public; no queue data",
            "security": [],
            "responses": {"200": _json_ok("alive", "Health")},
        }
    }
    paths["/openapi.json"] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document; public (it describes the API, it holds no data)",
            "security": [],
            "responses": {
                "200": {
                    "description": "OpenAPI 3.1",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
        }
    }
    paths["/control-room"] = {
        "get": {
            "operationId": "control_room",
            "summary": "The read-only control-room page; it holds no data (unlocked by token)",
            "security": [],
            "responses": {
                "200": {
                    "description": "HTML",
                    "content": {"text/html": {"schema": {"type": "string"}}},
                }
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "lane-coordinator",
            "version": __version__,
            "description": (
                "Lease coordinator for shared provider accounts. Every POST body carries "
                f"protocolVersion (supported: {list(C.SUPPORTED_PROTOCOLS)}); unknown fields "
                "are ignored; bodies are bounded by max_body_bytes (default "
                f"{C.DEFAULT_MAX_BODY_BYTES} bytes). Reply shapes: docs/protocol.md."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                BEARER: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a coordinator token (at least 32 bytes)",
                }
            },
        },
    }


@functools.cache
def openapi_bytes() -> bytes:
    return msgspec.json.encode(openapi_document())


if __name__ == "__main__":
    sys.stdout.write(msgspec.json.format(openapi_bytes().decode(), indent=2) + "\n")
