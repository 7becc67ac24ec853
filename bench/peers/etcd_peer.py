"""etcd in the peer table: one member (Debian's etcd-server, 3.4), default WAL (every raft
batch fsynced), on loopback in the bench's temp dir, driven over its JSON gRPC gateway.

The recipe is the one etcd's own client ships (clientv3/concurrency.Mutex), written out over
the gateway and widened to a counting semaphore of capacity N, since that is what a team
would copy: each client grants one lease (its session) and a lane's slot is the key
`/sem/<lane>/<lease id hex>` attached to it.

- acquire: one Txn — if the key's create_revision is 0, put it (with the lease) and range the
  prefix by create revision ascending, limit N; held when the key is among those N.
- wait, N = 1: Mutex's waitDeletes — range the newest key created before ours
  (max_create_revision = ours − 1, one key); none: held; else watch that key's DELETE from
  the range's revision + 1 (no event can slip between), then range again.
  N > 1: list the keys created before ours (keys only); fewer than N: held; else watch the
  prefix's DELETEs and list again.
- release: delete the key.

The v3 lock API (/v3/lock/lock) is the same Mutex run inside the server, for N = 1 only, and
a blocking call (no "queued" answer to hand back): not used. Every shape of the table is
N = 1."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import CLIENT_TIMEOUT, BenchError
from bench.peers.base import CAPACITY, Client, Hold, System
from bench.peers.daemon import Daemon, binary, free_port

LEASE_TTL = 600  # seconds; longer than a run, so no keep-alive is needed

NOTES = (
    "its recipe is FIFO by create revision and the revision can serve as a fence (nothing "
    "checks it); a dead holder's slot frees when its lease expires, which the leader checks "
    "on a 500 ms loop (a catch-up of up to 0.5 s, where our alarm fires at the deadline); "
    "no request identity (a retry from a new session is a second waiter), no audit of "
    "outcomes (only revisions, until compaction), no pause, no ETA; wake-ups: a watch per "
    "waiter (a held-open HTTP stream over the gateway), no polling"
)


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


class EtcdClient(Client):
    def __init__(
        self, s: aiohttp.ClientSession, url: str, lease: int, capacity: int = CAPACITY
    ) -> None:
        self.s = s
        self.url = url
        self.lease = lease
        self.capacity = capacity

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self.s.post(f"{self.url}{path}", json=body) as r:
            data = await r.json(content_type=None)
            if r.status >= 400 or "error" in data:
                raise BenchError(f"etcd {path}: {r.status} {data}")
            return dict(data)

    async def acquire(self, lane: str, i: int) -> Hold:
        prefix = f"/sem/{lane}/"
        key = f"{prefix}{self.lease:x}"
        owners = {
            "request_range": {
                "key": _b64(prefix),
                "range_end": _b64(prefix[:-1] + "0"),  # "/" + 1: the whole prefix
                "sort_order": "ASCEND",
                "sort_target": "CREATE",
                "limit": str(self.capacity),
            }
        }
        r = await self._post(
            "/v3/kv/txn",
            {
                "compare": [{"target": "CREATE", "key": _b64(key), "create_revision": "0"}],
                "success": [
                    {"request_put": {"key": _b64(key), "value": "", "lease": str(self.lease)}},
                    owners,
                ],
                "failure": [{"request_range": {"key": _b64(key)}}, owners],
            },
        )
        first, second = r["responses"]
        if r.get("succeeded"):
            rev = int(first["response_put"]["header"]["revision"])
        else:  # our key was there already (a retry): the same place in the queue
            rev = int(first["response_range"]["kvs"][0]["create_revision"])
        held = any(
            base64.b64decode(kv["key"]).decode() == key
            for kv in second["response_range"].get("kvs", [])
        )
        return Hold(lane, key, held, rev)

    async def _watch_delete(self, key: str, range_end: str | None, start_rev: int) -> None:
        """Until a DELETE of `key` (or of any key of [key, range_end)) at start_rev or later."""
        create: dict[str, Any] = {
            "key": _b64(key),
            "start_revision": str(start_rev),
            "filters": ["NOPUT"],
        }
        if range_end is not None:
            create["range_end"] = _b64(range_end)
        async with self.s.post(f"{self.url}/v3/watch", json={"create_request": create}) as r:
            async for line in r.content:
                if not line.strip():
                    continue
                msg = json.loads(line)
                if "error" in msg:
                    raise BenchError(f"etcd watch: {msg['error']}")
                events = msg.get("result", {}).get("events", [])
                if any(e.get("type") == "DELETE" for e in events):
                    return
        raise BenchError("etcd watch: the stream ended")

    async def wait(self, hold: Hold) -> None:
        prefix = hold.token.rsplit("/", 1)[0] + "/"
        end = prefix[:-1] + "0"
        while not hold.held:
            before: dict[str, Any] = {
                "key": _b64(prefix),
                "range_end": _b64(end),
                "max_create_revision": str(hold.rev - 1),
            }
            if self.capacity == 1:
                before |= {"sort_order": "DESCEND", "sort_target": "CREATE", "limit": "1"}
            else:  # (count_only would count every key: the revision filter prunes kvs only)
                before |= {"keys_only": True}
            r = await self._post("/v3/kv/range", before)
            rev = int(r["header"]["revision"])
            if self.capacity == 1:
                kvs = r.get("kvs", [])
                if not kvs:
                    hold.held = True
                    return
                await self._watch_delete(base64.b64decode(kvs[0]["key"]).decode(), None, rev + 1)
            else:
                if len(r.get("kvs", [])) < self.capacity:
                    hold.held = True
                    return
                await self._watch_delete(prefix, end, rev + 1)

    async def release(self, hold: Hold) -> None:
        await self._post("/v3/kv/deleterange", {"key": _b64(hold.token)})


class Etcd(System):
    key = "etcd"
    title = "etcd 3.4 (its Mutex recipe over the JSON gateway)"
    notes = NOTES

    def __init__(self) -> None:
        self.daemon: Daemon | None = None
        self.url = ""
        self._session: aiohttp.ClientSession | None = None

    async def start(self, tmp: Path) -> None:
        exe = binary("etcd", "etcd-server")
        client, peer = free_port(), free_port()
        curl, purl = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        home = tmp / "peer-etcd"
        cmd = [exe, "--name", "bench", "--data-dir", str(home / "data")]
        cmd += ["--listen-client-urls", curl, "--advertise-client-urls", curl]
        cmd += ["--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl]
        cmd += ["--initial-cluster", f"bench={purl}", "--logger", "zap", "--log-level", "warn"]
        self.daemon = Daemon("etcd", cmd, home)
        self.url = curl
        connector = aiohttp.TCPConnector(limit=0)
        self._session = aiohttp.ClientSession(connector=connector, timeout=CLIENT_TIMEOUT)
        await self.daemon.wait_ready(self._healthy)

    async def _healthy(self) -> None:
        assert self._session is not None
        async with self._session.get(f"{self.url}/health") as r:
            body = await r.json(content_type=None)
            if str(body.get("health")) != "true":
                raise BenchError(f"etcd /health: {body}")

    async def client(self, k: int) -> Client:
        assert self._session is not None, "not started"
        async with self._session.post(f"{self.url}/v3/lease/grant", json={"TTL": LEASE_TTL}) as r:
            lease = int((await r.json(content_type=None))["ID"])
        return EtcdClient(self._session, self.url, lease)

    def pids(self) -> dict[str, list[int]]:
        return {"server": [self.daemon.pid] if self.daemon is not None else []}

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self.daemon is not None:
            await asyncio.to_thread(self.daemon.stop)
            self.daemon = None
