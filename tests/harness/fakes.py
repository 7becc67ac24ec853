"""Fake servers for the fail-closed tests: things that answer on a loopback port but are not
the shared coordinator. Each runs on its own loop thread (an `AppThread`) and records the
paths it was asked for in `hits`."""

from __future__ import annotations

from aiohttp import web

from tests.harness.inproc import AppThread, fake_server

FAKE_KINDS = ("unauthorized", "garbage", "forbidden", "error500", "local", "postgres")


def fake_coordinator(kind: str) -> AppThread:
    """A fake server of one `kind`:

    - "unauthorized": 401 with an error body for everything
    - "garbage": 200 with an HTML page
    - "forbidden": 403 plain text (a proxy)
    - "error500": an `unavailable` error body with status 503
    - "local": a valid status shape that says coordinator=local-sqlite (not shared)
    - "postgres": the same shape saying coordinator=actor-postgres (shared replicas)
    """
    if kind not in FAKE_KINDS:
        raise ValueError(f"unknown fake kind {kind!r} (one of {FAKE_KINDS})")
    hits: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        hits.append(request.path)
        if kind == "unauthorized":
            return web.json_response(
                {"error": {"code": "unauthorized", "message": "Authorization: bad"}},
                status=401,
            )
        if kind == "garbage":
            return web.Response(
                text="<html><body>502 gateway oops</body></html>", content_type="text/html"
            )
        if kind == "forbidden":
            return web.Response(text="forbidden by proxy", status=403)
        if kind == "error500":
            return web.json_response(
                {"error": {"code": "unavailable", "message": "internal"}}, status=503
            )
        body = await request.json() if request.can_read_body else {}
        return web.json_response(
            {
                "coordinator": "actor-postgres" if kind == "postgres" else "local-sqlite",
                "lane": body.get("lane", "render:main"),
                "enforced": True,
                "capacity": 1,
                "held": [],
                "queued": [],
                "queuedTotal": 0,
                "pause": None,
                "now": 1.0,
            }
        )

    server = fake_server(handler)
    server.hits = hits
    return server
