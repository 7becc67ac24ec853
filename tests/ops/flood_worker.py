"""Requests at a steady rate from one address, for tests/ops/test_bad_token_flood.py.

`python -m tests.ops.flood_worker URL PATH RATE SECONDS`: RATE GET requests a second to PATH,
each with a random wrong bearer token (a new one each time), over CONNECTIONS kept-alive
connections, for SECONDS; prints `started` once the first answer came, then one JSON line:
{"sent": n, "seconds": s, "statuses": {"401": n, ...}}. PATH /v1/lanes: bad presentations;
PATH /healthz (public: the token is not looked at): the control, the same requests at the
same rate that cost the server the least."""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
import time
from collections import Counter

import aiohttp

CONNECTIONS = 16


async def flood(url: str, rate: float, seconds: float) -> dict[str, object]:
    """`url`: the server's URL and the path."""
    statuses: Counter[str] = Counter()
    interval = CONNECTIONS / rate  # each connection's pace
    started = asyncio.Event()

    async def worker(session: aiohttp.ClientSession, offset: float, end: float) -> None:
        next_at = time.monotonic() + offset
        while next_at < end:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            headers = {"Authorization": f"Bearer {secrets.token_urlsafe(32)}"}
            try:
                async with session.get(url, headers=headers) as resp:
                    await resp.read()
                    statuses[str(resp.status)] += 1
            except aiohttp.ClientError as exc:
                statuses[type(exc).__name__] += 1
            started.set()
            next_at += interval

    connector = aiohttp.TCPConnector(limit=CONNECTIONS)
    async with aiohttp.ClientSession(connector=connector) as session:
        begin = time.monotonic()
        end = begin + seconds
        tasks = [
            asyncio.create_task(worker(session, i * interval / CONNECTIONS, end))
            for i in range(CONNECTIONS)
        ]
        await started.wait()
        print("started", flush=True)
        await asyncio.gather(*tasks)
        took = time.monotonic() - begin
    return {"sent": sum(statuses.values()), "seconds": took, "statuses": dict(statuses)}


def main() -> None:
    url, path, rate, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
    print(json.dumps(asyncio.run(flood(url + path, rate, seconds))), flush=True)


if __name__ == "__main__":
    main()
