"""The HTTP server under the app: connection limits and deadlines, and the error shape for
every reply aiohttp would otherwise write itself.

`LaneRunner(app, config)` is `web.AppRunner` with these (`lane-coordinator serve` and the
in-process test server both use it), set from the `Config` the app was made with:

- `max_connections`: a connection over it is answered 503 `unavailable` and closed at once,
  before a byte of it is read (one rate-limited warning line, `http.connection_refused`).
- `header_timeout_seconds`: a new connection must deliver a complete request head within
  this, and so must every later request on a kept-alive connection, counted from its first
  byte; otherwise it is closed (`http.header_timeout`). A slowloris client holds a
  connection for seconds, not for ever.
- `keepalive_timeout_seconds`: an idle kept-alive connection is closed after this (aiohttp's
  own timer; `create_app` sets it in the app's `handler_args`).
- A request aiohttp's parser refuses (not HTTP, a request line or header too long, a bad
  Content-Length or chunked body) is answered 400 `bad-request` in the error shape with a
  fixed message per kind, never the request's bytes, and logged as one rate-limited warning
  line (`http.malformed_request`), never a traceback. So is anything else aiohttp would
  log with a traceback (`http.connection_error`).

`RateLimitedLog` is the one way these recurring, client-caused events are logged; cli.py
uses it for accept() failing with EMFILE.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import structlog
from aiohttp import http_exceptions as hx
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse
from aiohttp.web_server import Server

from coordinator.config import Config
from coordinator.constants import COORDINATOR_KIND
from coordinator.logs import RateLimitedLog
from coordinator.protocol import replies as wire
from coordinator.protocol.errors import (
    BadRequest,
    LaneError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
)

log = structlog.get_logger("coordinator.http")

_ErrorHandler = Callable[[BaseRequest], Awaitable[StreamResponse]]

SERVER_HEADER = "lane-coordinator"  # never the Python or aiohttp version
WWW_AUTHENTICATE = 'Bearer realm="lane-coordinator"'

# ---------------------------------------------------------------- the error shape


def json_reply(reply: wire.Wire, status: int = 200) -> web.Response:
    """A protocol reply, encoded (every /v1 reply already names its `coordinator`)."""
    return web.Response(
        body=msgspec.json.encode(reply), status=status, content_type="application/json"
    )


def error_response(
    err: LaneError, kind: str | None, headers: dict[str, str] | None = None
) -> web.Response:
    """The error shape, with `coordinator` = `kind` (None: left out, outside /v1); a 401 names
    the scheme to use (RFC 6750); `headers` are added."""
    resp = json_reply(err.reply(kind), err.status)
    if err.status == 401:
        resp.headers["WWW-Authenticate"] = WWW_AUTHENTICATE
    if headers:
        resp.headers.update(headers)
    return resp


def stamp_headers(response: StreamResponse, *, no_store: bool) -> None:
    """The headers every reply carries (`no_store`: token-gated data, and every error
    written outside the app)."""
    response.headers["Server"] = SERVER_HEADER
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    if no_store:
        response.headers.setdefault("Cache-Control", "no-store")


def _bare_error(err: LaneError, kind: str, headers: dict[str, str] | None = None) -> web.Response:
    """The error shape for a reply written outside the app's middlewares (no app signal
    adds its headers). Parser errors name the coordinator: the path they were meant for is
    unknown."""
    resp = error_response(err, kind, headers)
    stamp_headers(resp, no_store=True)
    return resp


def http_refusal(request: BaseRequest, exc: web.HTTPException) -> tuple[LaneError, dict[str, str]]:
    """An aiohttp HTTPException (aiohttp's own refusals: in the app's middleware, or escaping
    it, an `Expect:` header the app cannot meet being the one known case) in the protocol's codes,
    with the headers its reply needs (a wrong method is a 405 with an Allow header)."""
    if isinstance(exc, web.HTTPExpectationFailed):
        return BadRequest("Expect: only 100-continue is supported"), {}
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return PayloadTooLarge("body: larger than the configured max_body_bytes"), {}
    if isinstance(exc, web.HTTPNotFound):
        return NotFound("path: no such endpoint"), {}  # the path is never repeated
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        msg = f"method: {request.method} is not allowed on {request.path}; use {allowed}"
        return MethodNotAllowed(msg), {"Allow": allowed}
    if exc.status == 401:
        return Unauthorized(f"request: refused ({exc.status})"), {}
    if exc.status == 415:
        return UnsupportedMediaType(f"request: refused ({exc.status})"), {}
    return BadRequest(exc.reason), {}


def _guarded(handler: _ErrorHandler, kind: str) -> _ErrorHandler:
    """The app's handler, with what escapes its middlewares answered in the error shape."""

    async def guarded(request: BaseRequest) -> StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            err, headers = http_refusal(request, exc)
            return _bare_error(err, kind, headers)

    return guarded


def parser_error_message(exc: BaseException | None, max_size: int) -> str:
    """A fixed message per kind of request the HTTP parser refused: never its bytes."""
    if isinstance(exc, hx.LineTooLong):
        return f"request: the request line or a header is longer than {max_size} bytes"
    if isinstance(exc, hx.BadStatusLine):  # BadHttpMethod included
        return "request: not an HTTP/1.x request line"
    if isinstance(exc, hx.InvalidURLError):
        return "request: the request target is not a valid URL"
    if isinstance(exc, hx.InvalidHeader):
        return "request: a header is malformed"
    if isinstance(exc, hx.TransferEncodingError):
        return "body: malformed chunked transfer encoding"
    if isinstance(exc, hx.ContentLengthError):
        return "body: shorter or longer than its Content-Length"
    if isinstance(exc, hx.PayloadEncodingError):
        return "body: could not be decoded"
    return "request: malformed HTTP request"


# ---------------------------------------------------------------- per connection


class LaneRequestHandler(RequestHandler):
    """aiohttp's HTTP/1 protocol with the connection limit, the header deadline and the
    error shape (see the module docstring). Built by `LaneServer`, one per connection."""

    __slots__ = ("_counted", "_head_timer", "_lane", "_last_payload", "_refused")

    def __init__(self, manager: LaneServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._lane = manager
        self._head_timer: asyncio.TimerHandle | None = None
        self._last_payload: Any = None  # the body of the newest parsed request
        self._counted = False
        self._refused = False

    # -- connection limit

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        lane = self._lane
        if lane.open_connections >= lane.max_connections:
            self._refused = True
            assert isinstance(transport, asyncio.Transport)
            transport.write(lane.refusal)
            transport.close()
            lane.refused_log(limit=lane.max_connections)
            return
        lane.open_connections += 1
        self._counted = True
        super().connection_made(transport)
        self._arm_head_timer()  # the first request's head is due within the deadline

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._refused:
            return
        self._cancel_head_timer()
        if self._counted:
            self._counted = False
            self._lane.open_connections -= 1
        super().connection_lost(exc)

    # -- header deadline

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        last = self._last_payload
        in_body = last is not None and not last.is_eof()  # the bytes belong to a body
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:  # a complete request head (or a parse error)
            self._cancel_head_timer()
            if self._messages:
                self._last_payload = self._messages[-1][1]
        elif data and not in_body and self._head_timer is None and not self._upgraded:
            self._arm_head_timer()  # the first bytes of a new head: it is due in time

    def _arm_head_timer(self) -> None:
        self._head_timer = self._loop.call_later(self._lane.header_timeout, self._head_late)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.transport is None or self._force_close:
            return
        if self._request_in_progress or self._messages:
            # A head pipelined behind a request still being served: its deadline counts
            # from when the server gets to it.
            self._arm_head_timer()
            return
        self._lane.timeout_log(seconds=self._lane.header_timeout)
        self.force_close()

    # -- errors aiohttp writes itself

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> StreamResponse:
        """The parser's refusals (400) and a handler that failed outside the app's
        middlewares (500/504), in the error shape: one log line, no traceback, no echo."""
        if request.writer.output_size > 0:  # as aiohttp: too late for another response
            raise ConnectionError("the response was already started")
        err: LaneError
        if status < 500:
            msg = parser_error_message(exc, max(self.max_line_size, self.max_field_size))
            err = BadRequest(msg)
            self._lane.malformed_log(
                error=type(exc).__name__ if exc is not None else None,
                message=msg,
                detail="malformed HTTP request",
            )
        else:
            err = Unavailable("internal error; the request was not applied")
            log.error("http.internal_error", error=type(exc).__name__ if exc else None)
        resp = _bare_error(err, self._lane.kind)
        resp.force_close()
        return resp

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """aiohttp's `logger.exception` calls (an unhandled error on a connection, say a body
        that broke off while it was being drained): one rate-limited line, no traceback."""
        exc = kw.get("exc_info")
        self._lane.connection_error_log(
            error=type(exc).__name__ if isinstance(exc, BaseException) else None,
            message=str(args[0]) if args else None,
        )


class LaneServer(Server):
    """aiohttp's Server building `LaneRequestHandler`s, counting open connections."""

    def __init__(
        self,
        handler: _ErrorHandler,
        *,
        max_connections: int,
        header_timeout: float,
        kind: str = COORDINATOR_KIND,
        **kwargs: Any,
    ) -> None:
        super().__init__(_guarded(handler, kind), **kwargs)
        self.kind = kind
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.open_connections = 0
        self.refused_log = RateLimitedLog("http.connection_refused")
        # Info, not a warning: a browser's unused preconnection ends this way too.
        self.timeout_log = RateLimitedLog("http.header_timeout", level="info")
        self.malformed_log = RateLimitedLog("http.malformed_request")
        self.connection_error_log = RateLimitedLog("http.connection_error")
        self.refusal = _refusal_bytes(max_connections, kind)

    def __call__(self) -> RequestHandler:
        return LaneRequestHandler(self, loop=self._loop, **self._kwargs)


def _refusal_bytes(limit: int, kind: str) -> bytes:
    """The whole reply to a connection over the limit, written before reading anything."""
    err = Unavailable(f"connections: the server has its maximum of {limit} open; retry shortly")
    body = msgspec.json.encode(err.reply(kind))
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        f"Server: {SERVER_HEADER}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Retry-After: 1\r\n"
        "Cache-Control: no-store\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class LaneRunner(web.AppRunner):
    """`web.AppRunner` serving the app through `LaneServer`, limits from the app's Config."""

    def __init__(
        self,
        app: web.Application,
        config: Config,
        *,
        kind: str = COORDINATOR_KIND,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("access_log", None)
        kwargs.setdefault("handle_signals", False)
        super().__init__(app, **kwargs)
        self._config = config
        self._kind = kind

    async def _make_server(self) -> Server:
        base = await super()._make_server()  # runs the app's startup, freezes it
        return LaneServer(
            base.request_handler,
            max_connections=self._config.max_connections,
            header_timeout=self._config.header_timeout_seconds,
            kind=self._kind,
            request_factory=base.request_factory,
            handler_cancellation=base.handler_cancellation,
            loop=base._loop,
            **base._kwargs,
        )
