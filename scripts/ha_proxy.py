"""ha_proxy: a small HTTP proxy in front of lane-coordinator replicas (`make run-ha`).

    python scripts/ha_proxy.py --listen 127.0.0.1:8787 \\
        --replica http://127.0.0.1:8788 --replica http://127.0.0.1:8789

What it does, and nothing more (production: nginx or Caddy, see deploy/nginx-ha.conf):

- Health: every `--check-interval` seconds (1 s) it asks each replica's `GET /readyz` (a new
  connection each time, `--check-timeout` 1 s); 200 is ready, anything else (503, a refused
  connection, a timeout) is not. A replica whose connection is refused while forwarding is
  marked not ready at once. So a killed replica is out within about one interval.
- Routing: requests go round-robin to the ready replicas only. None ready: 503 `unavailable`
  (the protocol's "nothing was applied, retry") with `Retry-After: 1`.
- Retry: when the connection to a replica fails before any reply byte came back (refused,
  reset, closed, connect timeout), the same request goes to the next ready replica. That is
  safe here because every call of the protocol is idempotent (an acquire is keyed by its
  identity, every other write by its ticket, a receipt by its id). A 503 from a replica (it
  is starting, stopping or lost its database) is also tried on the next one.
- Streaming: the reply is passed on as it arrives, never buffered, and a request may wait
  `--read-timeout` (90 s) for its reply: long polls (`/v1/lanes/await`, up to 60 s) pass.
- Headers are kept both ways (Authorization included), less the hop-by-hop ones;
  X-Forwarded-For and X-Forwarded-Proto are added. Bodies pass untouched (a gzip body stays
  gzip: the coordinator decodes it after checking the token), up to 1 MiB.
- `GET /_ha/replicas` is the proxy's own: each replica's URL, readiness and why (JSON).

Log lines go to stderr: `ha-proxy listening on http://HOST:PORT` once bound, then one line per
readiness change and per retry. SIGINT/SIGTERM stop it (in-flight requests get 5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

STATUS_PATH = "/_ha/replicas"
MAX_BODY_BYTES = 1024 * 1024
KEEPALIVE_SECONDS = 75.0  # idle client connections, as the coordinator's own default
UPSTREAM_KEEPALIVE_SECONDS = 30.0  # below the coordinator's 75 s: we close idle ones first
SHUTDOWN_SECONDS = 5.0
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)


def log(event: str, **fields: object) -> None:
    """One line on stderr: time, event, key=value."""
    stamp = time.strftime("%H:%M:%S", time.localtime())
    rest = " ".join(f"{k}={v}" for k, v in fields.items())
    print(f"{stamp} ha-proxy {event} {rest}".rstrip(), file=sys.stderr, flush=True)


@dataclass
class Replica:
    url: str  # base URL, no trailing slash
    ready: bool = False
    reason: str = "not checked yet"
    since: float = field(default_factory=time.monotonic)
    checked: bool = False

    def mark(self, ready: bool, reason: str) -> None:
        """Record the state; the first one and every change are logged."""
        changed = ready != self.ready or not self.checked
        self.checked = True
        self.reason = reason
        if changed:
            self.ready = ready
            self.since = time.monotonic()
            if ready:
                log("replica.ready", url=self.url)
            else:
                log("replica.unready", url=self.url, reason=json.dumps(reason))


def _strip_hop_by_hop(headers: CIMultiDictProxy[str], drop: Iterable[str] = ()) -> CIMultiDict[str]:
    """The headers less the hop-by-hop ones (and those the Connection header names)."""
    named = {t.strip().lower() for v in headers.getall("Connection", []) for t in v.split(",")}
    skip = HOP_BY_HOP | named | {d.lower() for d in drop}
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in headers.items():
        if key.lower() not in skip:
            out.add(key, value)
    return out


def error_reply(status: int, code: str, message: str) -> web.Response:
    """The coordinator's JSON error shape (`{"error": {"code", "message"}}`)."""
    headers = {"Retry-After": "1"} if status == 503 else {}
    body = json.dumps({"error": {"code": code, "message": message}})
    return web.Response(status=status, text=body, content_type="application/json", headers=headers)


class Proxy:
    """The replicas, their health checks and the request handler."""

    def __init__(
        self,
        replicas: list[str],
        *,
        check_interval: float = 1.0,
        check_timeout: float = 1.0,
        connect_timeout: float = 2.0,
        read_timeout: float = 90.0,
    ) -> None:
        self.replicas = [Replica(u.rstrip("/")) for u in replicas]
        self.check_interval = check_interval
        self.check_timeout = check_timeout
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._turn = 0
        self._session: aiohttp.ClientSession | None = None
        self._checks: aiohttp.ClientSession | None = None
        self._checker: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self, app: web.Application) -> None:
        """Sessions, one round of checks (so the first request knows who is ready), then the
        periodic checks."""
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=UPSTREAM_KEEPALIVE_SECONDS),
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,  # bytes pass as they are, Content-Length stays right
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=self.connect_timeout, sock_read=self.read_timeout
            ),
        )
        self._checks = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True),  # a new connection per check
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=self.check_timeout),
        )
        await self.check_all()
        self._checker = asyncio.create_task(self._check_loop())

    async def stop(self, app: web.Application) -> None:
        if self._checker is not None:
            self._checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checker
        for session in (self._session, self._checks):
            if session is not None:
                await session.close()

    # ------------------------------------------------------------------ health

    async def _check_loop(self) -> None:
        """A round every check_interval (from one round's start to the next; `start` did the
        first one)."""
        began = time.monotonic()
        while True:
            await asyncio.sleep(max(0.0, self.check_interval - (time.monotonic() - began)))
            began = time.monotonic()
            await self.check_all()

    async def check_all(self) -> None:
        await asyncio.gather(*(self._check(r) for r in self.replicas))

    async def _check(self, replica: Replica) -> None:
        assert self._checks is not None
        try:
            async with self._checks.get(replica.url + "/readyz") as resp:
                raw = await resp.read()
        except TimeoutError:
            replica.mark(False, f"/readyz: no answer within {self.check_timeout:g} s")
            return
        except aiohttp.ClientConnectorError as exc:
            why = exc.os_error.strerror if exc.os_error is not None else type(exc).__name__
            replica.mark(False, f"/readyz: cannot connect ({why})")
            return
        except (aiohttp.ClientError, OSError) as exc:
            replica.mark(False, f"/readyz: {type(exc).__name__}")
            return
        if resp.status == 200:
            replica.mark(True, "ready")
            return
        message = ""
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            message = str(json.loads(raw)["error"]["message"])
        replica.mark(False, f"/readyz: HTTP {resp.status} {message}".rstrip())

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "replicas": [
                {
                    "url": r.url,
                    "ready": r.ready,
                    "reason": r.reason,
                    "forSeconds": round(now - r.since, 3),
                }
                for r in self.replicas
            ]
        }

    def _order(self) -> list[Replica]:
        """The ready replicas, starting one further on each call (round-robin)."""
        ready = [r for r in self.replicas if r.ready]
        if not ready:
            return []
        self._turn = (self._turn + 1) % len(ready)
        return ready[self._turn :] + ready[: self._turn]

    # ------------------------------------------------------------------ requests

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == STATUS_PATH and request.method == "GET":
            return web.json_response(self.status())
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return error_reply(413, "payload-too-large", "ha-proxy: the body is over 1 MiB")
        # the body is read already: no Expect: 100-continue round trip to the replica
        headers = _strip_hop_by_hop(request.headers, drop=("Content-Length", "Expect"))
        peer = request.remote or ""
        forwarded = headers.get("X-Forwarded-For")
        headers["X-Forwarded-For"] = f"{forwarded}, {peer}" if forwarded else peer
        headers.setdefault("X-Forwarded-Proto", request.scheme)
        order = self._order()
        if not order:
            return error_reply(503, "unavailable", "ha-proxy: no replica is ready; retry")
        failures: list[str] = []
        for i, replica in enumerate(order):
            last = i == len(order) - 1
            upstream = await self._send(request, replica, headers, body, failures, last)
            if upstream is None:
                continue
            try:
                if upstream.status == 503 and not last:
                    await upstream.read()
                    failures.append(f"{replica.url}: HTTP 503")
                    log(
                        "retry",
                        method=request.method,
                        path=request.path,
                        replica=replica.url,
                        reason="HTTP-503",
                        next=order[i + 1].url,
                    )
                    continue
                return await self._relay(request, upstream, replica)
            finally:
                upstream.release()
        return error_reply(
            503, "unavailable", "ha-proxy: no replica answered (" + "; ".join(failures) + ")"
        )

    async def _send(
        self,
        request: web.Request,
        replica: Replica,
        headers: CIMultiDict[str],
        body: bytes,
        failures: list[str],
        last: bool,
    ) -> aiohttp.ClientResponse | None:
        """The replica's reply (its status and headers read), or None when the connection
        failed before any reply byte (then recorded in `failures`)."""
        assert self._session is not None
        url = URL(replica.url + request.raw_path, encoded=True)
        try:
            return await self._session.request(
                request.method,
                url,
                headers=headers,
                data=body if request.body_exists else None,
                allow_redirects=False,
                skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
            )
        except aiohttp.ClientConnectorError as exc:  # nothing listens: the replica is down
            why = exc.os_error.strerror if exc.os_error is not None else type(exc).__name__
            replica.mark(False, f"connect failed while forwarding ({why})")
            reason = f"connect-failed ({why})"
        except TimeoutError:
            reason = "no reply in time"
        except (aiohttp.ClientError, OSError) as exc:  # reset or closed before the reply
            reason = type(exc).__name__
        failures.append(f"{replica.url}: {reason}")
        log(
            "retry" if not last else "failed",
            method=request.method,
            path=request.path,
            replica=replica.url,
            reason=json.dumps(reason),
        )
        return None

    async def _relay(
        self, request: web.Request, upstream: aiohttp.ClientResponse, replica: Replica
    ) -> web.StreamResponse:
        """Pass the reply on as it arrives. A replica lost mid-reply cannot be retried (the
        client has bytes already): the client's connection is closed, so it sees the reply
        cut short, never a wrong one."""
        resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        resp.headers.extend(_strip_hop_by_hop(upstream.headers))
        await resp.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await resp.write(chunk)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            log(
                "cut",
                method=request.method,
                path=request.path,
                replica=replica.url,
                reason=type(exc).__name__,
            )
            resp.force_close()
            if request.transport is not None:
                request.transport.close()
            return resp
        await resp.write_eof()
        return resp


def build_app(proxy: Proxy) -> web.Application:
    app = web.Application(
        client_max_size=MAX_BODY_BYTES,
        handler_args={"auto_decompress": False, "keepalive_timeout": KEEPALIVE_SECONDS},
    )
    app.on_startup.append(proxy.start)
    app.on_cleanup.append(proxy.stop)
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    return app


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ha_proxy", description=__doc__.split("\n", 1)[0])
    p.add_argument("--listen", type=_host_port, default=("127.0.0.1", 8787), metavar="HOST:PORT")
    p.add_argument(
        "--replica",
        action="append",
        required=True,
        metavar="URL",
        help="a replica's base URL (repeat per replica)",
    )
    p.add_argument("--check-interval", type=float, default=1.0, metavar="S")
    p.add_argument("--check-timeout", type=float, default=1.0, metavar="S")
    p.add_argument("--connect-timeout", type=float, default=2.0, metavar="S")
    p.add_argument("--read-timeout", type=float, default=90.0, metavar="S")
    return p


async def serve(args: argparse.Namespace) -> int:
    proxy = Proxy(
        args.replica,
        check_interval=args.check_interval,
        check_timeout=args.check_timeout,
        connect_timeout=args.connect_timeout,
        read_timeout=args.read_timeout,
    )
    runner = web.AppRunner(build_app(proxy), access_log=None, shutdown_timeout=SHUTDOWN_SECONDS)
    await runner.setup()
    host, port = args.listen
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        print(f"ha-proxy: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    bound = runner.addresses[0][1] if runner.addresses else port
    print(f"ha-proxy listening on http://{host}:{bound}", file=sys.stderr, flush=True)
    await stop.wait()
    log("stopping")
    await runner.cleanup()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(serve(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
