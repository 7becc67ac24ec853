"""The read-only routes: the control room's reads (lanes, incidents, machines, overview,
evidence), its page and packaged assets, and the public and metrics paths."""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from coordinator.clock import Clock
from coordinator.http.assets import CONTROL_ROOM_ASSETS
from coordinator.http.middleware import (
    CLOCK_KEY,
    CREDENTIAL_KEY,
    METRICS_KEY,
    PRESENCE_KEY,
    REGISTRY_KEY,
    SERVICE_KEY,
)
from coordinator.http.openapi import openapi_bytes
from coordinator.http.server import json_reply
from coordinator.metrics import CONTENT_TYPE
from coordinator.protocol import queries as Q
from coordinator.protocol import replies as wire
from coordinator.protocol.errors import (
    NotFound,
    Unavailable,
)


async def list_lanes(request: web.Request) -> web.Response:
    return json_reply(await request.app[SERVICE_KEY].lanes())


async def list_incidents(request: web.Request) -> web.Response:
    q = Q.decode_query(request.query, Q.IncidentsParams)
    return json_reply(await request.app[SERVICE_KEY].incidents(q.lane, q.limit))


async def list_machines(request: web.Request) -> web.Response:
    clock: Clock = request.app[CLOCK_KEY]  # type: ignore[assignment]
    now = clock.now()
    machines = await request.app[PRESENCE_KEY].view(now)
    kind = request.app[REGISTRY_KEY].kind
    return json_reply(wire.MachinesReply(coordinator=kind, machines=machines, now=now))


async def overview(request: web.Request) -> web.Response:
    """The control room's whole refresh in one bounded read (see LaneService.overview)."""
    q = Q.decode_query(request.query, Q.OverviewParams)
    reply = await request.app[SERVICE_KEY].overview(q)
    reply.machines = await request.app[PRESENCE_KEY].view(reply.now)
    return json_reply(reply)


async def evidence(request: web.Request) -> web.Response:
    q = Q.decode_query(request.query, Q.EvidenceParams)
    return json_reply(await request.app[SERVICE_KEY].evidence(q.lane, q.ticket_id))


async def whoami(request: web.Request) -> web.Response:
    """The presented credential's name, role and machine (docs/protocol.md#whoami): how the
    control room knows whether it was unlocked with one that can write."""
    cred = request[CREDENTIAL_KEY]
    kind = request.app[REGISTRY_KEY].kind
    return json_reply(
        wire.WhoamiReply(
            coordinator=kind,
            name=cred.name,
            role=cred.role.value,
            machine=cred.machine,
            can_write=cred.can_write,
        )
    )


async def dashboard(request: web.Request) -> web.Response:
    raise web.HTTPFound("/control-room")


async def metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS_KEY].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(body=openapi_bytes(), content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    return json_reply(wire.Healthz(ok=True))


async def readyz(request: web.Request) -> web.Response:
    """What a load balancer routes on: 200 while the server can commit, else 503 and why.
    Broken lanes are counted, not fatal: every other lane is served."""
    registry = request.app[REGISTRY_KEY]
    why = await registry.not_ready_reason()
    if why is not None:
        raise Unavailable(why)
    return json_reply(wire.Readyz(ready=True, broken_lanes=registry.broken_lane_count()))


def control_room_html() -> bytes:
    page = resources.files("coordinator.http") / "static" / "control-room.html"
    return page.read_bytes()


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
