"""A bare aiohttp JSON handler: the baseline the coordinator is compared with.

`python -m bench.bare_server [PORT]` (default 0: the OS picks one) serves POST
/v1/lanes/{op}, decoding the JSON body and answering a small JSON object, and prints
"bare listening on http://127.0.0.1:PORT" to stderr once it listens (as the coordinator
does), then runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

import msgspec
from aiohttp import web


async def handle(request: web.Request) -> web.Response:
    body = msgspec.json.decode(await request.read())
    return web.Response(
        body=msgspec.json.encode({"ok": True, "echo": body.get("lane")}),
        content_type="application/json",
    )


async def serve(port: int) -> None:
    app = web.Application()
    app.router.add_post("/v1/lanes/{op}", handle)
    await run_until_stopped(app, port, "bare")


async def run_until_stopped(app: web.Application, port: int, name: str) -> None:
    """Serve `app` on 127.0.0.1:`port` (0: the OS picks), say "<name> listening on URL" on
    stderr once it listens, and run until SIGTERM/SIGINT (the bench's servers all do)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    real = runner.addresses[0][1] if runner.addresses else port
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    print(f"{name} listening on http://127.0.0.1:{real}", file=sys.stderr, flush=True)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    asyncio.run(serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0))


if __name__ == "__main__":
    main()
