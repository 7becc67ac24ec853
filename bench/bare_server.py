"""A bare aiohttp JSON handler: the baseline the coordinator is compared with."""

from __future__ import annotations

import sys

import msgspec
from aiohttp import web


async def handle(request: web.Request) -> web.Response:
    body = msgspec.json.decode(await request.read())
    return web.Response(
        body=msgspec.json.encode({"ok": True, "echo": body.get("lane")}),
        content_type="application/json",
    )


def main() -> None:
    port = int(sys.argv[1])
    app = web.Application()
    app.router.add_post("/v1/lanes/{op}", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
