"""The aiohttp application factory: routes, auth, body limits, error mapping."""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec
import structlog
from aiohttp import web, web_response

from coordinator.actor.registry import LaneRegistry
from coordinator.clock import Clock, SystemClock
from coordinator.config import Config
from coordinator.constants import (
    COORDINATOR_KIND,
    DEFAULT_INCIDENTS_LIMIT,
    MAX_IDENTITY_CHARS,
    MAX_INCIDENTS_LIMIT,
    MAX_RECEIPT_PAYLOAD_BYTES,
    OVERVIEW_DEFAULT_HISTORY,
    OVERVIEW_DEFAULT_LOG_LIMIT,
    OVERVIEW_DEFAULT_QUEUED,
    OVERVIEW_DEFAULT_RECEIPTS,
    OVERVIEW_MAX_HISTORY,
    OVERVIEW_MAX_LOG_LIMIT,
    RECENT_RECEIPTS_LIMIT,
    STATUS_QUEUED_LIMIT,
    SUPPORTED_PROTOCOLS,
)
from coordinator.engine.commands import (
    Acquire,
    Cooldown,
    Heartbeat,
    RecordReceipt,
    Release,
    TicketCall,
)
from coordinator.http.body import read_body
from coordinator.http.openapi import openapi_bytes
from coordinator.http.presence import Presence
from coordinator.http.server import SERVER_HEADER, RateLimitedLog
from coordinator.metrics import CONTENT_TYPE, Metrics
from coordinator.protocol import replies as wire
from coordinator.protocol import requests as S
from coordinator.protocol.errors import (
    BadRequest,
    LaneError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    ReceiptConflict,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
    UnsupportedProtocol,
)
from coordinator.protocol.names import parse_lane
from coordinator.protocol.receipts import canonical_json, check_receipt_id, content_hash
from coordinator.service import LaneService, OverviewQuery, new_ticket_id

log = structlog.get_logger("coordinator.http")

CONFIG_KEY = web.AppKey("config", Config)
TOKENS_KEY = web.AppKey("tokens", list)
CLOCK_KEY = web.AppKey("clock", object)
REGISTRY_KEY = web.AppKey("registry", LaneRegistry)
SERVICE_KEY = web.AppKey("service", LaneService)
PRESENCE_KEY = web.AppKey("presence", Presence)
METRICS_KEY = web.AppKey("metrics", Metrics)
UNAUTHORIZED_LOG_KEY = web.AppKey("unauthorized_log", RateLimitedLog)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

WWW_AUTHENTICATE = 'Bearer realm="lane-coordinator"'
# SERVER_HEADER (server.py): "lane-coordinator", never the Python or aiohttp version.
# aiohttp stamps "Server: Python/3.x aiohttp/3.x" on every reply, the ones it writes itself
# for a request it cannot parse included (no app signal runs for those): name us instead.
setattr(web_response, "SERVER_SOFTWARE", SERVER_HEADER)  # noqa: B010


def _json(reply: wire.Wire, status: int = 200) -> web.Response:
    """A protocol reply, encoded (every /v1 reply already names its `coordinator`)."""
    return web.Response(
        body=msgspec.json.encode(reply), status=status, content_type="application/json"
    )


def _error(
    request: web.Request, exc: LaneError, headers: dict[str, str] | None = None
) -> web.Response:
    """The error shape; under /v1 it carries `coordinator` like every /v1 reply."""
    v1 = request.path.startswith("/v1/")
    resp = _json(exc.reply(COORDINATOR_KIND if v1 else None), exc.status)
    if exc.status == 401:  # RFC 6750: say which scheme to use
        resp.headers["WWW-Authenticate"] = WWW_AUTHENTICATE
    if headers:
        resp.headers.update(headers)
    return resp


def _http_error(request: web.Request, exc: web.HTTPException) -> tuple[LaneError, dict[str, str]]:
    """aiohttp's own refusals, in SPEC's codes (a wrong method is a 405 with an Allow header)."""
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return PayloadTooLarge("body: larger than the configured max_body_bytes"), {}
    if isinstance(exc, web.HTTPNotFound):
        return NotFound(f"path: no endpoint {request.path}"), {}
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        msg = f"method: {request.method} is not allowed on {request.path}; use {allowed}"
        return MethodNotAllowed(msg), {"Allow": allowed}
    return BadRequest(exc.reason), {}


# ---------------------------------------------------------------- middlewares


async def _reply_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: every reply of the app, errors and redirects included."""
    response.headers["Server"] = SERVER_HEADER
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    path = request.path
    if path == "/v1" or path.startswith("/v1/") or path == "/metrics":
        response.headers.setdefault("Cache-Control", "no-store")  # token-gated data


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    status = 500
    try:
        resp = await handler(request)
        status = resp.status
        return resp
    except web.HTTPException as exc:
        if exc.status in (301, 302, 303, 307, 308):
            status = exc.status
            raise
        err, headers = _http_error(request, exc)
        status = err.status
        return _error(request, err, headers)
    except LaneError as exc:
        status = exc.status
        return _error(request, exc)
    except Exception as exc:  # never a traceback or a 500 to the caller
        status = 503
        log.error("http.internal_error", path=request.path, error=type(exc).__name__)
        return _error(request, Unavailable("internal error; the request was not applied"))
    finally:
        log.debug(
            "http.request",
            method=request.method,
            path=request.path,
            status=status,
            ms=round((time.perf_counter() - started) * 1000, 2),
        )
        resource = request.match_info.route.resource  # canonical path: bounded labels
        request.app[METRICS_KEY].http_request(
            resource.canonical if resource is not None else None,
            request.method,
            status,
            time.perf_counter() - started,
        )


def _authorized(request: web.Request) -> bool:
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        return False
    given_b = given.strip().encode("utf-8", "surrogateescape")
    ok = False
    for token in request.app[TOKENS_KEY]:
        ok |= hmac.compare_digest(given_b, token)
    return ok


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    protected = request.path.startswith("/v1/") or request.path in ("/v1", "/metrics")
    if protected and not _authorized(request):
        # A wrong token can come as fast as a client sends it: one line a minute at most,
        # counting them, never the token or the path. The body is never read or decoded.
        request.app[UNAUTHORIZED_LOG_KEY](remote=request.remote)
        raise Unauthorized("Authorization: a valid bearer token is required")
    return await handler(request)


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
    try:
        body = S.convert(data, schema)  # 1.0 is version 1, "limit": 100.0 is 100
    except msgspec.ValidationError as exc:
        raise BadRequest(_validation_message(str(exc))) from None
    parse_lane(body.lane)
    return body


def _validation_message(text: str) -> str:
    """'Expected `int` >= 15 - at `$.leaseSeconds`' -> 'leaseSeconds: Expected `int` >= 15'."""
    msg, sep, where = text.rpartition(" - at `$.")
    if sep:
        return f"{where.rstrip('`')}: {msg}"
    if text.startswith("Object missing required field"):
        field = text.split("`")[1] if "`" in text else "?"
        return f"{field}: required"
    return text


def _saw(request: web.Request, lane: str | None, machine: str | None, claim: str | None) -> None:
    if machine:
        clock: Clock = request.app[CLOCK_KEY]  # type: ignore[assignment]
        request.app[PRESENCE_KEY].saw(machine, clock.now(), lane, claim)


def _call(body: S.TicketBody) -> TicketCall:
    return TicketCall(body.machine_id, body.claim_id, body.ticket_id)


# ---------------------------------------------------------------- handlers


async def acquire(request: web.Request) -> web.Response:
    b: S.AcquireBody = await _body(request, S.AcquireBody)
    _saw(request, b.lane, b.machine_id, b.claim_id)
    cmd = Acquire(
        b.machine_id,
        b.claim_id,
        b.project,
        b.scene,
        b.prompt_hash,
        b.lease_seconds,
        new_ticket_id(),
    )
    return _json(await request.app[SERVICE_KEY].acquire(b.lane, cmd))


async def await_(request: web.Request) -> web.Response:
    b: S.AwaitBody = await _body(request, S.AwaitBody)
    _saw(request, b.lane, b.machine_id, b.claim_id)
    return _json(await request.app[SERVICE_KEY].await_(b.lane, _call(b), b.wait_seconds))


async def heartbeat(request: web.Request) -> web.Response:
    b: S.HeartbeatBody = await _body(request, S.HeartbeatBody)
    _saw(request, b.lane, b.machine_id, b.claim_id)
    reply = await request.app[SERVICE_KEY].heartbeat(b.lane, Heartbeat(_call(b), b.lease_seconds))
    return _json(reply)


async def release(request: web.Request) -> web.Response:
    b: S.ReleaseBody = await _body(request, S.ReleaseBody)
    _saw(request, b.lane, b.machine_id, b.claim_id)
    cmd = Release(_call(b), b.outcome, b.provider_job_id, b.note)
    return _json(await request.app[SERVICE_KEY].release(b.lane, cmd))


async def receipt(request: web.Request) -> web.Response:
    b: S.ReceiptBody = await _body(request, S.ReceiptBody)
    _saw(request, b.lane, b.machine_id, b.claim_id)
    check_receipt_id(b.receipt_id, b.ticket_id, b.phase)
    canonical = canonical_json(b.payload)
    if len(canonical) > MAX_RECEIPT_PAYLOAD_BYTES:
        raise BadRequest(f"payload: larger than {MAX_RECEIPT_PAYLOAD_BYTES} bytes")
    cmd = RecordReceipt(
        machine_id=b.machine_id,
        claim_id=b.claim_id,
        ticket_id=b.ticket_id,
        receipt_id=b.receipt_id,
        phase=b.phase,
        payload_json=canonical.decode("utf-8"),
        content_hash=b.content_hash,
        computed_hash=content_hash(canonical),
    )
    try:
        status, reply = await request.app[SERVICE_KEY].receipt(b.lane, cmd)
    except ReceiptConflict:
        request.app[METRICS_KEY].receipt_verdict("conflict")
        raise
    if reply.replay:
        request.app[METRICS_KEY].receipt_verdict("replay")
    return _json(reply, status)


async def cooldown(request: web.Request) -> web.Response:
    b: S.CooldownBody = await _body(request, S.CooldownBody)
    _saw(request, b.lane, b.machine_id, b.claim_id)
    cmd = Cooldown(_call(b), b.reason_code, b.retry_after_seconds)
    return _json(await request.app[SERVICE_KEY].cooldown(b.lane, cmd))


async def status(request: web.Request) -> web.Response:
    b: S.StatusBody = await _body(request, S.StatusBody)
    _saw(request, b.lane, b.machine_id, None)
    return _json(await request.app[SERVICE_KEY].status(b.lane, b.include_receipts))


async def history(request: web.Request) -> web.Response:
    b: S.HistoryBody = await _body(request, S.HistoryBody)
    _saw(request, b.lane, b.machine_id, None)
    return _json(await request.app[SERVICE_KEY].history(b.lane, b.limit, b.project))


def _query_lane(request: web.Request, required: bool) -> str | None:
    """`lane=route:account`; absent means every lane where that is allowed. An empty value is
    not a lane name (400), as the schema says."""
    lane = request.query.get("lane")
    if required and not lane:
        raise BadRequest("lane: required query parameter")
    if lane is None:
        return None
    parse_lane(lane)
    return lane


def _query_int(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name}: must be an integer") from None
    if not lo <= value <= hi:
        raise BadRequest(f"{name}: must be between {lo} and {hi}")
    return value


async def list_lanes(request: web.Request) -> web.Response:
    return _json(await request.app[SERVICE_KEY].lanes())


async def list_incidents(request: web.Request) -> web.Response:
    lane = _query_lane(request, required=False)
    limit = _query_int(request, "limit", DEFAULT_INCIDENTS_LIMIT, 1, MAX_INCIDENTS_LIMIT)
    return _json(await request.app[SERVICE_KEY].incidents(lane, limit))


async def list_machines(request: web.Request) -> web.Response:
    clock: Clock = request.app[CLOCK_KEY]  # type: ignore[assignment]
    now = clock.now()
    machines = request.app[PRESENCE_KEY].view(now)
    return _json(wire.MachinesReply(coordinator=COORDINATOR_KIND, machines=machines, now=now))


async def overview(request: web.Request) -> web.Response:
    """The control room's whole refresh in one bounded read (see LaneService.overview)."""
    project = request.query.get("project")
    if project == "":
        raise BadRequest("project: empty; leave it out for every project")
    if project is not None and len(project) > MAX_IDENTITY_CHARS:
        raise BadRequest(f"project: at most {MAX_IDENTITY_CHARS} characters")
    q = OverviewQuery(
        history=_query_int(request, "history", OVERVIEW_DEFAULT_HISTORY, 0, OVERVIEW_MAX_HISTORY),
        queued=_query_int(request, "queued", OVERVIEW_DEFAULT_QUEUED, 0, STATUS_QUEUED_LIMIT),
        receipts=_query_int(
            request, "receipts", OVERVIEW_DEFAULT_RECEIPTS, 0, RECENT_RECEIPTS_LIMIT
        ),
        incidents=_query_int(request, "incidents", DEFAULT_INCIDENTS_LIMIT, 1, MAX_INCIDENTS_LIMIT),
        lane=_query_lane(request, required=False),
        project=project,
        limit=_query_int(request, "limit", OVERVIEW_DEFAULT_LOG_LIMIT, 1, OVERVIEW_MAX_LOG_LIMIT),
    )
    reply = await request.app[SERVICE_KEY].overview(q)
    reply.machines = request.app[PRESENCE_KEY].view(reply.now)
    return _json(reply)


async def evidence(request: web.Request) -> web.Response:
    lane = _query_lane(request, required=True)
    assert lane is not None
    ticket_id = request.query.get("ticketId") or None
    return _json(await request.app[SERVICE_KEY].evidence(lane, ticket_id))


async def dashboard(request: web.Request) -> web.Response:
    raise web.HTTPFound("/control-room")


async def metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS_KEY].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(body=openapi_bytes(), content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    return _json(wire.Healthz(ok=True))


def control_room_html() -> bytes:
    page = resources.files("coordinator.http") / "static" / "control-room.html"
    return page.read_bytes()


# The control room's own script and style, shipped in the package (no CDN, no build): a fixed
# list of file names, never a path taken from the request. The script is native ES modules:
# control-room.js is the entry (<script type="module">) and imports the others by
# './name.js', so every module it reaches must be named here (tests/integration/
# test_control_room_assets.py walks the imports). Module scripts need a JavaScript type.
_CONTROL_ROOM_MODULES = (
    "control-room.js",  # entry: render() and the wiring
    "config.js",
    "api.js",
    "state.js",
    "dom.js",
    "format.js",
    "view.js",
    "widgets.js",
    "session.js",
    "alerts.js",
    "lanes.js",
    "timeline.js",
    "log.js",
    "receipts.js",
    "incidents.js",
    "computers.js",
    "evidence.js",
)
CONTROL_ROOM_ASSETS: dict[str, str] = {
    **{name: "text/javascript" for name in _CONTROL_ROOM_MODULES},
    "control-room.css": "text/css",
}


_CONTROL_ROOM_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


async def control_room_asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    content_type = CONTROL_ROOM_ASSETS.get(name)
    if content_type is None:
        raise NotFound(f"path: no control-room asset {name!r}")
    body = (resources.files("coordinator.http") / "static" / name).read_bytes()
    return web.Response(
        body=body,
        content_type=content_type,
        charset="utf-8",
        headers=_CONTROL_ROOM_HEADERS,
    )


async def control_room(request: web.Request) -> web.Response:
    return web.Response(
        body=control_room_html(),
        content_type="text/html",
        charset="utf-8",
        headers={
            "Content-Security-Policy": (
                "default-src 'none'; script-src 'self'; "
                "style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
                "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
            ),
            "Cache-Control": "no-store",
            "Referrer-Policy": "no-referrer",
            "X-Content-Type-Options": "nosniff",
        },
    )


# ---------------------------------------------------------------- factory


def create_app(
    config: Config,
    tokens: list[bytes],
    data_dir: Path,
    clock: Clock | None = None,
) -> web.Application:
    clock = clock or SystemClock()
    app = web.Application(
        middlewares=[error_middleware, auth_middleware],
        client_max_size=config.max_body_bytes,
        # The parser must not decode a compressed body as it arrives (before auth, outside
        # the limits): `read_body` does, for an authorized request. Idle kept-alive
        # connections close after keepalive_timeout_seconds (LaneRunner adds the rest).
        handler_args={
            "auto_decompress": False,
            "keepalive_timeout": config.keepalive_timeout_seconds,
        },
    )
    app[METRICS_KEY] = Metrics()  # a registry per app: several apps never share series
    registry = LaneRegistry(config, data_dir, clock, app[METRICS_KEY])
    app[CONFIG_KEY] = config
    app[TOKENS_KEY] = tokens
    app[CLOCK_KEY] = clock
    app[REGISTRY_KEY] = registry
    app[SERVICE_KEY] = LaneService(registry, clock)
    app[PRESENCE_KEY] = Presence()
    app[UNAUTHORIZED_LOG_KEY] = RateLimitedLog("http.unauthorized")

    for name, handler in (
        ("acquire", acquire),
        ("await", await_),
        ("heartbeat", heartbeat),
        ("release", release),
        ("receipt", receipt),
        ("status", status),
        ("history", history),
        ("cooldown", cooldown),
    ):
        app.router.add_post(f"/v1/lanes/{name}", handler, name=f"lanes_{name}_op")
    app.router.add_get("/v1/lanes", list_lanes, name="lanes")
    app.router.add_get("/v1/incidents", list_incidents, name="incidents")
    app.router.add_get("/v1/machines", list_machines, name="machines")
    app.router.add_get("/v1/evidence", evidence, name="evidence")
    app.router.add_get("/v1/overview", overview, name="overview")
    app.router.add_get("/v1/dashboard", dashboard, name="dashboard")
    app.router.add_get("/healthz", healthz, name="healthz")
    app.router.add_get("/metrics", metrics, name="metrics")  # bearer: see auth_middleware
    app.router.add_get("/openapi.json", openapi_json, name="openapi")  # public
    app.router.add_get("/control-room", control_room, name="control-room")
    app.router.add_get("/control-room/assets/{name}", control_room_asset, name="control-room-asset")

    async def on_startup(app: web.Application) -> None:
        await app[REGISTRY_KEY].start()  # "coordinator.started" is logged once listening (cli)

    async def on_shutdown(app: web.Application) -> None:
        app[REGISTRY_KEY].drain()  # parked long polls answer now, not after the grace period

    async def on_cleanup(app: web.Application) -> None:
        await app[REGISTRY_KEY].stop()
        log.info("coordinator.stopped")

    app.on_response_prepare.append(_reply_headers)
    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    return app
