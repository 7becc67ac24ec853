"""The bare baseline of the peer table: aiohttp, one in-memory FIFO semaphore per lane, no
storage, no leases, no identity: what HTTP + JSON + asyncio cost on this machine.

`python -m bench.peers.fifo_server [PORT] [CAPACITY]` (default 0: the OS picks the port;
capacity 1) serves POST /v1/lanes/acquire, /await and /release with the fields and reply
shapes of ours (`lane`, `ticketId`, `waitSeconds`; `{granted, ticket: {ticketId, state}}`), so
the same client adapter drives both; prints "fifo listening on http://127.0.0.1:PORT" to
stderr once it listens, then runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import msgspec
from aiohttp import web

from bench.bare_server import run_until_stopped

_ids = itertools.count(1)


@dataclass(slots=True)
class Lane:
    holders: set[str] = field(default_factory=set)
    queue: deque[str] = field(default_factory=deque)
    wakers: dict[str, asyncio.Future[None]] = field(default_factory=dict)


class Fifo:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.lanes: dict[str, Lane] = {}

    def lane(self, name: str) -> Lane:
        lane = self.lanes.get(name)
        if lane is None:
            lane = self.lanes[name] = Lane()
        return lane

    def acquire(self, name: str) -> tuple[str, bool]:
        lane, tid = self.lane(name), f"f{next(_ids)}"
        if len(lane.holders) < self.capacity and not lane.queue:
            lane.holders.add(tid)
            return tid, True
        lane.queue.append(tid)
        return tid, False

    async def wait(self, name: str, tid: str, seconds: float) -> bool:
        lane = self.lane(name)
        if tid in lane.holders or tid not in lane.queue:
            return tid in lane.holders
        fut = lane.wakers[tid] = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(fut), seconds)
        lane.wakers.pop(tid, None)
        return tid in lane.holders

    def release(self, name: str, tid: str) -> None:
        lane = self.lane(name)
        if tid in lane.holders:
            lane.holders.discard(tid)
        else:
            with contextlib.suppress(ValueError):
                lane.queue.remove(tid)
        while lane.queue and len(lane.holders) < self.capacity:
            nxt = lane.queue.popleft()
            lane.holders.add(nxt)
            fut = lane.wakers.get(nxt)
            if fut is not None and not fut.done():
                fut.set_result(None)


def _reply(tid: str, held: bool) -> web.Response:
    body = {"granted": held, "ticket": {"ticketId": tid, "state": "held" if held else "queued"}}
    return web.Response(body=msgspec.json.encode(body), content_type="application/json")


def app(capacity: int) -> web.Application:
    fifo = Fifo(capacity)

    async def handle(request: web.Request) -> web.Response:
        body: dict[str, Any] = msgspec.json.decode(await request.read())
        op, lane = request.match_info["op"], str(body["lane"])
        if op == "acquire":
            return _reply(*fifo.acquire(lane))
        tid = str(body["ticketId"])
        if op == "await":
            return _reply(tid, await fifo.wait(lane, tid, float(body.get("waitSeconds", 30))))
        if op == "release":
            fifo.release(lane, tid)
            return web.Response(body=b'{"released":true}', content_type="application/json")
        raise web.HTTPNotFound()

    application = web.Application()
    application.router.add_post("/v1/lanes/{op}", handle)
    return application


async def serve(port: int, capacity: int) -> None:
    await run_until_stopped(app(capacity), port, "fifo")


def main() -> None:
    args = sys.argv[1:]
    asyncio.run(serve(int(args[0]) if args else 0, int(args[1]) if len(args) > 1 else 1))


if __name__ == "__main__":
    main()
