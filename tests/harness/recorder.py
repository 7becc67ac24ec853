"""A recording reverse proxy: every request it forwards to a real coordinator and the reply it
got back, so a test can judge each reply of a whole run (a drill's processes talk to it as
if it were the coordinator) against the OpenAPI document.

`RecordingProxy(upstream_url)` serves on 127.0.0.1:<port 0> (an `AppThread`); `.url` is where
clients point, `.replies()` what was answered so far: {method, path, status, headers,
contentType, body} with `body` the parsed JSON of a JSON reply, the text of any other, None
when it had none. Bodies and headers pass through unchanged (no decompression, no redirects
followed); hop-by-hop headers are dropped.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import aiohttp
from aiohttp import web

from tests.harness.inproc import AppThread

_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}
)
_SESSION_KEY = web.AppKey("upstream", aiohttp.ClientSession)


def _body(content_type: str, raw: bytes) -> Any:
    if not raw:
        return None
    text = raw.decode("utf-8", errors="replace")
    if content_type.split(";")[0].strip() == "application/json":
        return json.loads(text)
    return text


class RecordingProxy:
    """Forwards every method and path to `upstream` and records each reply."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self._replies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._thread = AppThread(self._make_app)
        self.url = self._thread.url

    def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=4 << 20)
        app.router.add_route("*", "/{tail:.*}", self._forward)

        async def session(app: web.Application) -> Any:
            # Long polls last up to 60 s: the proxy waits longer than any client does.
            timeout = aiohttp.ClientTimeout(total=180)
            async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as s:
                app[_SESSION_KEY] = s
                yield

        app.cleanup_ctx.append(session)
        return app

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        sent = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with request.app[_SESSION_KEY].request(
            request.method,
            self.upstream + request.path_qs,
            data=sent or None,
            headers=headers,
            allow_redirects=False,
        ) as upstream:
            raw = await upstream.read()
            status = upstream.status
            back = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}
        content_type = back.get("Content-Type", "")
        with self._lock:
            self._replies.append(
                {
                    "method": request.method,
                    "path": request.path,
                    "status": status,
                    "headers": back,
                    "contentType": content_type,
                    "body": _body(content_type, raw),
                }
            )
        return web.Response(status=status, body=raw, headers=back)

    def replies(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._replies)

    def stop(self) -> None:
        self._thread.stop()
