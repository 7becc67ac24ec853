"""The aiohttp application factory and the lane operations' handlers: routes, body limits
and parsing. Auth, error mapping and reply headers are coordinator/http/middleware.py; the
read-only routes and the control room coordinator/http/reads.py."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from coordinator.actor.registry import LaneRegistry
from coordinator.clock import Clock, SystemClock
from coordinator.config import Config
from coordinator.credentials import Credentials, Role
from coordinator.engine import commands
from coordinator.http.access import check_machine
from coordinator.http.body import read_body
from coordinator.http.middleware import (
    CLOCK_KEY,
    CONFIG_KEY,
    CREDENTIAL_KEY,
    CREDENTIALS_KEY,
    FORBIDDEN_LOG_KEY,
    METRICS_KEY,
    PRESENCE_KEY,
    REGISTRY_KEY,
    SERVICE_KEY,
    UNAUTHORIZED_LOG_KEY,
    app_middleware,
    reply_headers,
)
from coordinator.http.presence import Presence
from coordinator.http.reads import (
    control_room,
    control_room_asset,
    dashboard,
    evidence,
    healthz,
    list_incidents,
    list_lanes,
    list_machines,
    metrics,
    openapi_json,
    overview,
    readyz,
    whoami,
)
from coordinator.http.server import json_reply
from coordinator.logs import RateLimitedLog
from coordinator.metrics import Metrics
from coordinator.protocol import requests as S
from coordinator.protocol.constants import MAX_RECEIPT_PAYLOAD_BYTES, SUPPORTED_PROTOCOLS
from coordinator.protocol.errors import (
    BadRequest,
    ReceiptConflict,
    Unavailable,
    UnsupportedMediaType,
    UnsupportedProtocol,
)
from coordinator.protocol.names import new_ticket_id
from coordinator.protocol.receipts import canonical_json, check_receipt_id, content_hash
from coordinator.service import LaneService
from coordinator.store.presence import presence_store_for
from coordinator.store.storage import open_storage

log = structlog.get_logger("coordinator.http")

# Every request allocates a few hundred container objects, so with the default threshold
# (700) the youngest generation is collected every few requests; 10,000 measured about 10 %
# less CPU per operation (docs/architecture.md, "The hot path"). Older generations keep
# their defaults (a full collection after 100 young ones).
GC_YOUNG_THRESHOLD = 10_000


def tune_gc() -> None:
    """The server's garbage-collector thresholds (process-wide, idempotent)."""
    young, older, oldest = gc.get_threshold()
    gc.set_threshold(max(GC_YOUNG_THRESHOLD, young), older, oldest)


# ---------------------------------------------------------------- request parsing


async def _body(request: web.Request, schema: type[S.Base]) -> Any:
    if request.content_type != "application/json":
        raise UnsupportedMediaType("Content-Type: must be application/json")
    config = request.app[CONFIG_KEY]
    raw = await read_body(request, config.max_body_bytes, config.body_timeout_seconds)
    data = S.decode_body(raw)  # 400: not JSON, not an object, too deep, a duplicate key
    if "protocolVersion" not in data:
        raise BadRequest("protocolVersion: required (this server speaks 1)")
    pv = data["protocolVersion"]
    if isinstance(pv, bool) or pv not in SUPPORTED_PROTOCOLS:
        raise UnsupportedProtocol(
            f"protocolVersion: {pv!r} is not supported; supported: "
            f"{', '.join(str(p) for p in SUPPORTED_PROTOCOLS)}",
            supported=list(SUPPORTED_PROTOCOLS),
        )
    return S.validate(data, schema)  # 1.0 is version 1, "limit": 100.0 is 100


def _caller(request: web.Request, lane: str | None, machine: str | None, claim: str | None) -> str:
    """The body's machine checked against the credential's (403 machine-mismatch), then
    presence: the machine a signed call names (written through to the store, throttled; never
    fails the request; the claim is not kept). Returns the credential's name, what the
    call's writes record (docs/protocol.md#credentials)."""
    cred = request[CREDENTIAL_KEY]
    check_machine(cred, machine)
    if machine:
        clock: Clock = request.app[CLOCK_KEY]  # type: ignore[assignment]
        request.app[PRESENCE_KEY].saw(machine, clock.now(), lane)
    return cred.name


def _call(body: S.TicketBody, credential: str) -> commands.TicketCall:
    return commands.TicketCall(body.machine_id, body.claim_id, body.ticket_id, credential)


# ---------------------------------------------------------------- handlers


async def acquire(request: web.Request) -> web.Response:
    b: S.AcquireBody = await _body(request, S.AcquireBody)
    who = _caller(request, b.lane, b.machine_id, b.claim_id)
    if request.transport is None or request.transport.is_closing():
        # The client gave up (e.g. while the server was frozen): a ticket made now would be a
        # ghost nobody waits for, and could be promoted and hold the slot for a whole lease.
        raise Unavailable("the client has gone; nothing was applied")
    cmd = commands.Acquire(
        b.machine_id,
        b.claim_id,
        b.project,
        b.scene,
        b.prompt_hash,
        b.lease_seconds,
        new_ticket_id(),
        who,
    )
    return json_reply(await request.app[SERVICE_KEY].acquire(b.lane, cmd))


async def await_(request: web.Request) -> web.Response:
    b: S.AwaitBody = await _body(request, S.AwaitBody)
    call = _call(b, _caller(request, b.lane, b.machine_id, b.claim_id))
    return json_reply(await request.app[SERVICE_KEY].await_(b.lane, call, b.wait_seconds))


async def heartbeat(request: web.Request) -> web.Response:
    b: S.HeartbeatBody = await _body(request, S.HeartbeatBody)
    call = _call(b, _caller(request, b.lane, b.machine_id, b.claim_id))
    reply = await request.app[SERVICE_KEY].heartbeat(
        b.lane, commands.Heartbeat(call, b.lease_seconds)
    )
    return json_reply(reply)


async def release(request: web.Request) -> web.Response:
    b: S.ReleaseBody = await _body(request, S.ReleaseBody)
    call = _call(b, _caller(request, b.lane, b.machine_id, b.claim_id))
    cmd = commands.Release(call, b.outcome, b.provider_job_id, b.note)
    return json_reply(await request.app[SERVICE_KEY].release(b.lane, cmd))


async def reconcile(request: web.Request) -> web.Response:
    b: S.ReconcileBody = await _body(request, S.ReconcileBody)
    call = _call(b, _caller(request, b.lane, b.machine_id, b.claim_id))
    # the ticket's machine, or an admin credential for any machine's (docs/protocol.md#reconcile)
    admin = request[CREDENTIAL_KEY].role is Role.ADMIN
    cmd = commands.Reconcile(call, b.outcome, b.provider_job_id, b.note, admin=admin)
    return json_reply(await request.app[SERVICE_KEY].reconcile(b.lane, cmd))


async def receipt(request: web.Request) -> web.Response:
    b: S.ReceiptBody = await _body(request, S.ReceiptBody)
    who = _caller(request, b.lane, b.machine_id, b.claim_id)
    check_receipt_id(b.receipt_id, b.ticket_id, b.phase)
    canonical = canonical_json(b.payload)
    if len(canonical) > MAX_RECEIPT_PAYLOAD_BYTES:
        raise BadRequest(f"payload: larger than {MAX_RECEIPT_PAYLOAD_BYTES} bytes")
    cmd = commands.RecordReceipt(
        machine_id=b.machine_id,
        claim_id=b.claim_id,
        ticket_id=b.ticket_id,
        receipt_id=b.receipt_id,
        phase=b.phase,
        payload_json=canonical.decode("utf-8"),
        content_hash=b.content_hash,
        computed_hash=content_hash(canonical),
        credential=who,
    )
    try:
        status, reply = await request.app[SERVICE_KEY].receipt(b.lane, cmd)
    except ReceiptConflict:
        request.app[METRICS_KEY].receipt_verdict("conflict")
        raise
    if reply.replay:
        request.app[METRICS_KEY].receipt_verdict("replay")
    return json_reply(reply, status)


async def cooldown(request: web.Request) -> web.Response:
    b: S.CooldownBody = await _body(request, S.CooldownBody)
    call = _call(b, _caller(request, b.lane, b.machine_id, b.claim_id))
    cmd = commands.Cooldown(call, b.reason_code, b.retry_after_seconds)
    return json_reply(await request.app[SERVICE_KEY].cooldown(b.lane, cmd))


async def status(request: web.Request) -> web.Response:
    b: S.StatusBody = await _body(request, S.StatusBody)
    _caller(request, b.lane, b.machine_id, None)
    return json_reply(await request.app[SERVICE_KEY].status(b.lane, b.include_receipts))


async def history(request: web.Request) -> web.Response:
    b: S.HistoryBody = await _body(request, S.HistoryBody)
    _caller(request, b.lane, b.machine_id, None)
    return json_reply(await request.app[SERVICE_KEY].history(b.lane, b.limit, b.project))


# ---------------------------------------------------------------- factory


def create_app(
    config: Config,
    credentials: Credentials,
    data_dir: Path | None,
    clock: Clock | None = None,
    *,
    store: str | None = None,
) -> web.Application:
    """The coordinator's app on the store `store` names (None: the config's `store`, else
    SQLite lane files under `data_dir`)."""
    clock = clock or SystemClock()
    stall = config.replica_stall_seconds
    storage = open_storage(store or config.store, data_dir, stall_seconds=stall)
    app = web.Application(
        middlewares=[app_middleware],
        client_max_size=config.max_body_bytes,
        # The parser must not decode a compressed body as it arrives (before auth, outside
        # the limits): `read_body` does, for an authorized request. Idle kept-alive
        # connections close after keepalive_timeout_seconds (LaneRunner adds the rest).
        handler_args={
            "auto_decompress": False,
            "keepalive_timeout": config.keepalive_timeout_seconds,
        },
    )
    # A registry per app: several apps never share series.
    app[METRICS_KEY] = Metrics(config.metrics_max_lanes)
    registry = LaneRegistry(config, storage, clock, app[METRICS_KEY])
    app[CONFIG_KEY] = config
    app[CREDENTIALS_KEY] = credentials
    app[CLOCK_KEY] = clock
    app[REGISTRY_KEY] = registry
    app[SERVICE_KEY] = LaneService(registry, clock)
    # Presence lives beside the lanes: a small file in the data dir (never a lane file), or
    # the `presence` table of the PostgreSQL database (coordinator/store/presence*.py).
    presence = presence_store_for(store or config.store, data_dir, stall_seconds=stall)
    app[PRESENCE_KEY] = Presence(presence, None)
    app[UNAUTHORIZED_LOG_KEY] = RateLimitedLog("http.unauthorized")
    app[FORBIDDEN_LOG_KEY] = RateLimitedLog("http.forbidden")

    for name, handler in (
        ("acquire", acquire),
        ("await", await_),
        ("heartbeat", heartbeat),
        ("release", release),
        ("receipt", receipt),
        ("status", status),
        ("history", history),
        ("cooldown", cooldown),
        ("reconcile", reconcile),
    ):
        app.router.add_post(f"/v1/lanes/{name}", handler, name=f"lanes_{name}_op")
    app.router.add_get("/v1/lanes", list_lanes, name="lanes")
    app.router.add_get("/v1/incidents", list_incidents, name="incidents")
    app.router.add_get("/v1/machines", list_machines, name="machines")
    app.router.add_get("/v1/evidence", evidence, name="evidence")
    app.router.add_get("/v1/overview", overview, name="overview")
    app.router.add_get("/v1/dashboard", dashboard, name="dashboard")
    app.router.add_get("/v1/whoami", whoami, name="whoami")
    app.router.add_get("/healthz", healthz, name="healthz")
    app.router.add_get("/readyz", readyz, name="readyz")  # public, like /healthz
    app.router.add_get("/metrics", metrics, name="metrics")  # bearer: see app_middleware
    app.router.add_get("/openapi.json", openapi_json, name="openapi")  # public
    app.router.add_get("/control-room", control_room, name="control-room")
    app.router.add_get("/control-room/", control_room, name="control-room-slash")  # same page
    app.router.add_get("/control-room/assets/{name}", control_room_asset, name="control-room-asset")

    async def on_startup(app: web.Application) -> None:
        tune_gc()
        await app[REGISTRY_KEY].start()  # "coordinator.started" is logged once listening (cli)

    async def on_shutdown(app: web.Application) -> None:
        app[REGISTRY_KEY].drain()  # parked long polls answer now, not after the grace period

    async def on_cleanup(app: web.Application) -> None:
        try:
            await app[REGISTRY_KEY].stop()
        finally:
            await app[PRESENCE_KEY].close()  # writes the sightings the throttle held back
        log.info("coordinator.stopped")

    app.on_response_prepare.append(reply_headers)
    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    return app
