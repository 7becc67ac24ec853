"""Redis in the peer table: Debian's redis-server (7.0), `appendonly yes`, `appendfsync always`
(every write fsynced before its reply), no RDB snapshots, on loopback in the bench's temp dir,
driven with the `redis` package's asyncio client.

The recipe, per lane: a sorted set of holders (token → lease deadline, ms), a list of waiting
tokens (FIFO) and one wake list per waiter; three Lua scripts, each one atomic round trip.
Every script first reaps holders whose deadline has passed and promotes waiters into free
slots (RPUSH onto each promoted waiter's wake list).

- acquire: held at once when a slot is free and nobody waits, else RPUSH onto the queue.
- wait: BLPOP on the waiter's own wake list — a release pushes to it, so the hand-off needs
  no polling. Redis has no timer of its own: a holder that died is only reaped when a script
  runs, so the BLPOP times out every CATCH_UP_SECONDS and runs the reap script (the catch-up
  loop; it never fires in these shapes, where every holder releases).
- release: remove the token (holder or waiter), reap and promote."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from bench.peers.base import CAPACITY, Client, Hold, System
from bench.peers.daemon import Daemon, binary, free_port

LEASE_MS = 300_000  # a holder's lease (as ours' default_lease_seconds)
CATCH_UP_SECONDS = 1.0  # the BLPOP timeout after which a waiter reaps expired holders

_PROMOTE = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function promote(holders, queue, cap, now, ttl, wake)
  redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
  while redis.call('ZCARD', holders) < cap do
    local nxt = redis.call('LPOP', queue)
    if not nxt then break end
    redis.call('ZADD', holders, now + ttl, nxt)
    redis.call('RPUSH', wake .. nxt, '1')
    redis.call('PEXPIRE', wake .. nxt, ttl)
  end
end
local cap, ttl, now = tonumber(ARGV[2]), tonumber(ARGV[3]), now_ms()
"""
# KEYS: holders, queue; ARGV: token, capacity, lease ms, wake-list prefix
ACQUIRE = (
    _PROMOTE
    + """
promote(KEYS[1], KEYS[2], cap, now, ttl, ARGV[4])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) < cap and redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  return 1
end
if not redis.call('LPOS', KEYS[2], ARGV[1]) then redis.call('RPUSH', KEYS[2], ARGV[1]) end
return 0
"""
)
RELEASE = (
    _PROMOTE
    + """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('DEL', ARGV[4] .. ARGV[1])
promote(KEYS[1], KEYS[2], cap, now, ttl, ARGV[4])
return 1
"""
)
REAP = (
    _PROMOTE
    + """
promote(KEYS[1], KEYS[2], cap, now, ttl, ARGV[4])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
return 0
"""
)

NOTES = (
    "its recipe is FIFO (a wait list per lane); no fences (an INCR would give one), no "
    "request identity beyond the client's token, no audit of outcomes, no pause, no ETA; "
    "Redis has no timers: a dead holder is reaped only when a script runs, so each waiter's "
    f"BLPOP wakes every {CATCH_UP_SECONDS:g} s to run the reap script (the catch-up loop, "
    "idle in these shapes; our alarm fires at the deadline instead); a hand-off wakes by "
    "BLPOP, no polling; one node: a failover to a replica (asynchronous) can lose "
    "acknowledged grants"
)


def _keys(lane: str) -> tuple[list[str], str]:
    return [f"sem:{lane}:holders", f"sem:{lane}:queue"], f"sem:{lane}:wake:"


class RedisClient(Client):
    def __init__(self, peer: Redis, k: int, capacity: int = CAPACITY) -> None:
        self.peer = peer
        self.k = k
        self.capacity = capacity

    def _args(self, hold: Hold) -> tuple[list[str], list[Any]]:
        keys, wake = _keys(hold.lane)
        return keys, [hold.token, self.capacity, LEASE_MS, wake]

    async def acquire(self, lane: str, i: int) -> Hold:
        hold = Hold(lane, f"c{self.k}-{i}", False)
        keys, args = self._args(hold)
        hold.held = bool(await self.peer.script("acquire", keys, args))
        return hold

    async def wait(self, hold: Hold) -> None:
        keys, args = self._args(hold)
        wake = f"{args[3]}{hold.token}"
        while not hold.held:
            if await self.peer.redis.blpop([wake], timeout=CATCH_UP_SECONDS):
                hold.held = True
            else:  # the catch-up: nothing else would reap a dead holder ahead of us
                hold.held = bool(await self.peer.script("reap", keys, args))

    async def release(self, hold: Hold) -> None:
        keys, args = self._args(hold)
        await self.peer.script("release", keys, args)


class Redis(System):
    key = "redis"
    title = "Redis 7 (Lua semaphore, FIFO wait list, AOF always)"
    notes = NOTES

    def __init__(self) -> None:
        self.daemon: Daemon | None = None
        self._redis: aioredis.Redis | None = None
        self._sha: dict[str, str] = {}

    @property
    def redis(self) -> aioredis.Redis:
        assert self._redis is not None, "not started"
        return self._redis

    async def start(self, tmp: Path) -> None:
        exe = binary("redis-server", "redis-server")
        port, home = free_port(), tmp / "peer-redis"
        home.mkdir(parents=True, exist_ok=True)
        conf = home / "redis.conf"
        settings = {
            "port": str(port),
            "bind": "127.0.0.1",
            "protected-mode": "yes",
            "dir": str(home),
            "appendonly": "yes",
            "appendfsync": "always",
            "save": '""',
            "daemonize": "no",
            "loglevel": "warning",
            "maxclients": "10000",
        }
        conf.write_text("".join(f"{k} {v}\n" for k, v in settings.items()))
        self.daemon = Daemon("redis", [exe, str(conf)], home)
        self._redis = aioredis.Redis(host="127.0.0.1", port=port, socket_timeout=120)
        await self.daemon.wait_ready(self.redis.ping)
        for name, lua in (("acquire", ACQUIRE), ("release", RELEASE), ("reap", REAP)):
            self._sha[name] = str(await self.redis.script_load(lua))

    async def script(self, name: str, keys: list[str], args: list[Any]) -> int:
        """EVALSHA of a loaded script (one round trip)."""
        return int(await self.redis.evalsha(self._sha[name], len(keys), *keys, *args))

    async def client(self, k: int) -> Client:
        return RedisClient(self, k)

    def pids(self) -> dict[str, list[int]]:
        return {"server": [self.daemon.pid] if self.daemon is not None else []}

    async def stop(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None
        if self.daemon is not None:
            await asyncio.to_thread(self.daemon.stop)
            self.daemon = None
