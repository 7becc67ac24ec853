"""The app's keys and the middleware every request goes through (one: bearer-token auth and
the credential's role (coordinator/http/access.py), errors in the protocol's shape — never a
traceback —, request metrics and logs), and the reply headers."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web, web_response

from coordinator.actor.registry import LaneRegistry
from coordinator.config import Config
from coordinator.credentials import Credential, Credentials
from coordinator.http.access import check_role
from coordinator.http.presence import Presence
from coordinator.http.server import SERVER_HEADER, error_response, http_refusal, stamp_headers
from coordinator.logs import RateLimitedLog, enabled
from coordinator.metrics import Metrics
from coordinator.protocol.errors import (
    LaneError,
    RoleForbidden,
    Unauthorized,
    Unavailable,
)
from coordinator.service import LaneService

log = structlog.get_logger("coordinator.http")

CONFIG_KEY = web.AppKey("config", Config)
CREDENTIALS_KEY = web.AppKey("credentials", Credentials)
# The credential a /v1 or /metrics request presented (set by the auth check).
CREDENTIAL_KEY = web.RequestKey("credential", Credential)
CLOCK_KEY = web.AppKey("clock", object)
REGISTRY_KEY = web.AppKey("registry", LaneRegistry)
SERVICE_KEY = web.AppKey("service", LaneService)
PRESENCE_KEY = web.AppKey("presence", Presence)
METRICS_KEY = web.AppKey("metrics", Metrics)
UNAUTHORIZED_LOG_KEY = web.AppKey("unauthorized_log", RateLimitedLog)
FORBIDDEN_LOG_KEY = web.AppKey("forbidden_log", RateLimitedLog)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# aiohttp stamps "Server: Python/3.x aiohttp/3.x" on every reply, the ones it writes itself
# for a request it cannot parse included (no app signal runs for those): name us instead.
setattr(web_response, "SERVER_SOFTWARE", SERVER_HEADER)  # noqa: B010


def _error(
    request: web.Request, exc: LaneError, headers: dict[str, str] | None = None
) -> web.Response:
    """The error shape; under /v1 it carries `coordinator` like every /v1 reply."""
    v1 = request.path.startswith("/v1/")
    return error_response(exc, request.app[REGISTRY_KEY].kind if v1 else None, headers)


# ---------------------------------------------------------------- middlewares


async def reply_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: every reply of the app, errors and redirects included."""
    path = request.path
    stamp_headers(response, no_store=path == "/v1" or path.startswith("/v1/") or path == "/metrics")


@web.middleware
async def app_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every request: the bearer token (for /v1 and /metrics), then the handler; any error
    in the protocol's shape (never a traceback); its duration in the metrics (one middleware: each
    one aiohttp chains costs a wrapper and a coroutine per request)."""
    started = time.perf_counter()
    status = 500
    try:
        _check_auth(request)
        resp = await handler(request)
        status = resp.status
        return resp
    except web.HTTPException as exc:
        if exc.status in (301, 302, 303, 307, 308):
            status = exc.status
            raise
        err, headers = http_refusal(request, exc)
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
        seconds = time.perf_counter() - started
        if enabled(logging.DEBUG):
            log.debug(
                "http.request",
                method=request.method,
                path=request.path,
                status=status,
                ms=round(seconds * 1000, 2),
                credential=cred.name if (cred := request.get(CREDENTIAL_KEY)) else None,
            )
        resource = request.match_info.route.resource  # canonical path: bounded labels
        request.app[METRICS_KEY].http_request(
            resource.canonical if resource is not None else None,
            request.method,
            status,
            seconds,
        )


def _presented(request: web.Request) -> Credential | None:
    """The credential of the request's bearer token, or None (docs/protocol.md#credentials:
    the token is hashed once and looked up by its digest)."""
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        return None
    return request.app[CREDENTIALS_KEY].authenticate(
        given.strip().encode("utf-8", "surrogateescape")
    )


def _check_auth(request: web.Request) -> None:
    path = request.path
    if not (path.startswith("/v1/") or path in ("/v1", "/metrics")):
        return  # public
    cred = _presented(request)
    if cred is None:
        # A wrong token can come as fast as a client sends it: one line a minute at most,
        # counting them, never the token or the path. The body is never read or decoded.
        request.app[UNAUTHORIZED_LOG_KEY](remote=request.remote)
        raise Unauthorized("Authorization: a valid bearer token is required")
    request[CREDENTIAL_KEY] = cred
    match = request.match_info
    if match.http_exception is not None:
        return  # no such route or method: the router's 404 / 405
    try:
        check_role(cred, match.route.name, request.method, path)
    except RoleForbidden:
        # before the body is read; one line a minute at most (a misused credential retries)
        request.app[FORBIDDEN_LOG_KEY](
            credential=cred.name, role=cred.role.value, path=path, remote=request.remote
        )
        raise
