"""Resource faults under load: (e) a low open-file limit with more lanes than descriptors,
and a burst of connections that runs accept() out of descriptors; (f) idle and slowloris
connections (and idle kept-alive ones) while the load runs.

The base load (eight clients on three lanes, tests/faults/load.py) runs throughout and the
recorded-history checker judges it afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import resource
import socket
import sys
import time
from pathlib import Path

import pytest

from tests.faults.kit import assert_clean, assert_no_traceback, pick, seed
from tests.faults.load import base_load
from tests.faults.table import Row
from tests.harness import StartCoordinator, make_config
from tests.harness.load import Target

# ---------------------------------------------------------------- (e) a low ulimit -n

NOFILE = 128
WIDE_LANES = [f"solo:w{i:02d}" for i in range(48)]  # 48 + 3 lanes: 153 descriptors if all open
BURST = 160  # connections held at once: more than the descriptors left


def low_nofile(n: int) -> list[str]:
    """`serve` under a hard open-file limit of `n` (it cannot raise it)."""
    code = (
        f"import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({n}, {n})); "
        "from coordinator.cli import main; sys.exit(main())"
    )
    return [sys.executable, "-c", code]


def _hold_connections(port: int, n: int) -> list[socket.socket]:
    held = []
    for _ in range(n):
        with contextlib.suppress(OSError):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    return held


@pytest.mark.fault("(e) ulimit -n 128, 51 lanes, a burst of connections past the limit")
async def test_low_open_file_limit(
    row: Row, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    s = seed()
    rng = random.Random(s)
    srv = start_coordinator(tmp_path / "data", config=make_config(), command=low_nofile(NOFILE))
    target = Target([srv.url], srv.token)
    wide = [rng.sample(WIDE_LANES, len(WIDE_LANES)) for _ in range(4)]
    load = base_load(target, seed=s, more=wide)
    held: list[socket.socket] = []
    try:
        await asyncio.sleep(pick(3.0, 10.0))
        burst = load.ledger.mark("burst")
        held = await asyncio.to_thread(_hold_connections, srv.port, BURST)
        await asyncio.sleep(pick(3.0, 6.0))
        for sock in held:
            sock.close()
        eased = load.ledger.mark("eased")
        await asyncio.sleep(pick(4.0, 10.0))
    finally:
        for sock in held:
            sock.close()
        await load.finish()
    report = await load.verify()
    during = [e for e in load.ledger.snapshot() if burst <= e.sent_at <= eased]
    emfile = [e for e in load.ledger.snapshot() if e.status == 503 and "EMFILE" in str(e.reply)]
    budget = srv.events("lanes.descriptor_budget")
    accept = srv.events("http.accept_failed")
    row.report(report)
    row.note(
        f"{len(load.lanes)} lanes under a limit of {NOFILE} descriptors (lane files open at "
        f"once: {budget[0]['lanes_open_at_once'] if budget else '?'}); {len(held)} extra "
        f"connections held: {len(accept)} http.accept_failed line(s) "
        f"({', '.join(str(a.get('error')) for a in accept)}), {len(emfile)} lane calls 503 "
        f"EMFILE, {sum(1 for e in during if e.acknowledged)} acks during the burst, "
        f"{load.ledger.acknowledged_after(eased)} after; {load.cycles} cycles, seed {s}"
    )
    assert_clean(report, load, [srv])
    assert srv.proc.poll() is None, "the server exited"
    assert len(load.lanes) * 3 > NOFILE  # more lane files than descriptors, had they stayed open
    assert budget and budget[0]["lanes_open_at_once"] < len(load.lanes), budget
    assert accept and all(a["error"] == "EMFILE" for a in accept), accept
    assert load.ledger.acknowledged_after(eased) > 0, "nothing acknowledged after the burst"
    wide_acks = {e.lane for e in load.ledger.acknowledged() if e.lane in WIDE_LANES}
    assert len(wide_acks) == len(WIDE_LANES), f"lanes never served: {set(WIDE_LANES) - wide_acks}"
    assert_no_traceback([srv])


# ---------------------------------------------------------------- (f) idle and slowloris

HEADER_TIMEOUT = pick(3.0, 10.0)  # the production default is 10 s
KEEPALIVE_TIMEOUT = pick(5.0, 15.0)  # the production default is 75 s
MARGIN = 3.0  # the machine is shared


def _listen_drops() -> int:
    """Connections the kernel completed for a client but dropped before the server could
    accept them (listen queue overflow, SYN-cookie handshakes whose ACK found the queue full):
    the client believes it is connected, the server never hears of it. System-wide counters
    of this network namespace."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return 0
    for head, values in zip(lines[::2], lines[1::2], strict=False):
        if head.startswith("TcpExt:"):
            got = dict(zip(head.split()[1:], (int(v) for v in values.split()[1:]), strict=False))
            return got.get("ListenOverflows", 0) + got.get("TCPReqQFullDoCookies", 0)
    return 0


async def _until_closed(reader: asyncio.StreamReader, limit: float) -> float | None:
    """Seconds until the server closes the connection (EOF or reset), None after `limit`."""
    start = time.monotonic()
    try:
        while await asyncio.wait_for(reader.read(65536), limit - (time.monotonic() - start)):
            pass
    except TimeoutError:
        return None
    except (ConnectionError, OSError):
        pass
    return time.monotonic() - start


async def _idle(port: int) -> float | None:
    """A connection that sends nothing: seconds from connect to close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return await _until_closed(reader, HEADER_TIMEOUT + 30)
    finally:
        writer.close()


async def _slowloris(port: int) -> float | None:
    """A request head trickled one byte a second, never finished: seconds to close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    start = time.monotonic()

    async def trickle() -> None:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                await asyncio.sleep(1.0)
                writer.write(b"a")
                await writer.drain()

    sender = asyncio.create_task(trickle())
    try:
        left = await _until_closed(reader, HEADER_TIMEOUT + 30)
        return None if left is None else time.monotonic() - start
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
        writer.close()


async def _kept_alive(port: int) -> float | None:
    """One request on a kept-alive connection, then idle: seconds from the reply to close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        length = int(
            next(
                ln.split(b":", 1)[1]
                for ln in head.split(b"\r\n")
                if ln.lower().startswith(b"content-length")
            )
        )
        await reader.readexactly(length)
        return await _until_closed(reader, KEEPALIVE_TIMEOUT + 30)
    finally:
        writer.close()


@pytest.mark.fault("(f) idle, slowloris and idle kept-alive connections during the load")
async def test_idle_and_slowloris_connections(
    row: Row, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard:  # our side of a thousand connections
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    idle, slow, kept = pick(200, 600), pick(50, 150), pick(50, 150)
    s = seed()
    config = make_config(
        header_timeout_seconds=HEADER_TIMEOUT, keepalive_timeout_seconds=KEEPALIVE_TIMEOUT
    )
    srv = start_coordinator(tmp_path / "data", config=config)
    target = Target([srv.url], srv.token)
    load = base_load(target, seed=s)
    try:
        await asyncio.sleep(2.0)
        attack = load.ledger.mark("attack")
        jobs = [
            *[_idle(srv.port) for _ in range(idle)],
            *[_slowloris(srv.port) for _ in range(slow)],
            *[_kept_alive(srv.port) for _ in range(kept)],
        ]
        kernel_before = _listen_drops()
        tasks = []
        for i, job in enumerate(jobs):  # paced: a flood of SYNs overflows the listen queue
            tasks.append(asyncio.create_task(job))
            if i % 25 == 24:
                await asyncio.sleep(0.05)
        closed = await asyncio.gather(*tasks, return_exceptions=True)
        dropped = _listen_drops() - kernel_before
        over = load.ledger.mark("over")
        await asyncio.sleep(2.0)
    finally:
        await load.finish()
    report = await load.verify()
    errors = [c for c in closed if isinstance(c, BaseException)]
    times = [c if isinstance(c, float) else None for c in closed]
    t_idle, t_slow, t_kept = times[:idle], times[idle : idle + slow], times[idle + slow :]

    def worst(ts: list[float | None]) -> str:
        got = [t for t in ts if t is not None]
        never = len(ts) - len(got)
        return f"max {max(got):.1f} s" + (f", {never} never" if never else "") if got else "none"

    acks_during = sum(1 for e in load.ledger.acknowledged() if attack <= e.sent_at <= over)
    row.report(report)
    row.note(
        f"{idle} idle closed ({worst(t_idle)}), {slow} slowloris ({worst(t_slow)}) — header "
        f"timeout {HEADER_TIMEOUT:g} s; {kept} idle kept-alive ({worst(t_kept)}) — keep-alive "
        f"timeout {KEEPALIVE_TIMEOUT:g} s; {acks_during} acks during the attack "
        f"({over - attack:.1f} s); kernel listen-queue drops {dropped}; seed {s}"
    )
    assert_clean(report, load, [srv])
    assert not errors, errors[:3]
    # an idle connection the kernel dropped before accept() is never closed: not the server's
    never = sum(1 for t in t_idle if t is None)
    assert never <= dropped, f"{never} idle connections never closed ({dropped} kernel drops)"
    assert all(t is None or t <= HEADER_TIMEOUT + MARGIN for t in t_idle), worst(t_idle)
    assert all(t is not None and t <= HEADER_TIMEOUT + MARGIN for t in t_slow), worst(t_slow)
    assert all(
        t is not None and KEEPALIVE_TIMEOUT - 1.5 <= t <= KEEPALIVE_TIMEOUT + MARGIN for t in t_kept
    ), worst(t_kept)
    assert acks_during > 0, "the load stalled during the attack"
    assert srv.events("http.header_timeout"), "no http.header_timeout line"
    assert_no_traceback([srv])
