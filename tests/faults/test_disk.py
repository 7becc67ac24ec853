"""(d) Disk full: the data dir on a small tmpfs (tests/faults/disk.py) filled to the last byte.

- Under load: writes answer 503 `unavailable` (never another 5xx), a new lane cannot be
  created (503, and no file is left behind), `/readyz` says 503 with the reason; nothing
  acknowledged is lost; once space is back the same process serves writes again (no restart)
  and the recorded history checks clean.
- The log names the cause (ENOSPC, "database or disk is full") of a failed commit.
- Startup on a full disk serves reads: after a kill -9, and after a clean stop.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.faults.disk import SmallDisk
from tests.faults.kit import assert_clean, assert_no_traceback, pick, readyz, seed
from tests.faults.load import base_load
from tests.faults.table import Row
from tests.harness import CoordinatorProcess, StartCoordinator, make_config, write_config
from tests.harness.history import Ledger, check, read_views
from tests.harness.load import Settings, Target

DISK_SIZE = "64m"  # room for the lanes' WALs (up to 4 MB each before a checkpoint)
FULL_SECONDS = pick(5.0, 20.0)
CAUSES = ("ENOSPC", "disk is full", "No space left")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[str], SmallDisk]]:
    made: list[SmallDisk] = []

    def make(size: str = DISK_SIZE) -> SmallDisk:
        disk = SmallDisk(tmp_path / f"disk{len(made)}", size)
        made.append(disk)
        return disk

    yield make
    for disk in made:
        disk.close()


def _start(
    start: StartCoordinator, disk: SmallDisk, tmp_path: Path, **kwargs: Any
) -> CoordinatorProcess:
    """`serve` inside the disk's namespace; token and config outside it (the test writes
    them in its own view of the file system, where the mountpoint is an empty dir)."""
    config = write_config(tmp_path / "config.toml", make_config())
    return start(
        disk.mountpoint / "data",
        token_file=tmp_path / "token",
        config=config,
        command=disk.command(),
        **kwargs,
    )


async def _probe_new_lane(
    session: aiohttp.ClientSession, target: Target, ledger: Ledger, lane: str
) -> tuple[int | None, Any]:
    """One acquire that would create `lane` (recorded in the ledger); a grant is released."""
    headers = {"Authorization": f"Bearer {target.token}"}
    timeout = aiohttp.ClientTimeout(total=10)
    result: tuple[int | None, Any] = (None, None)
    for op, extra in (
        ("acquire", {"project": "p", "scene": "s", "promptHash": "h"}),
        ("release", {}),
    ):
        body = {"protocolVersion": 1, "lane": lane, "machineId": "prober", **extra}
        if op == "release":
            if result[0] != 200:
                break
            body["ticketId"] = result[1]["ticket"]["ticketId"]
            body["outcome"] = "not-submitted"
        entry = ledger.sent("prober", op, lane, body, target=target.urls[0])
        try:
            async with session.post(
                f"{target.urls[0]}/v1/lanes/{op}", json=body, headers=headers, timeout=timeout
            ) as r:
                data = await r.json(content_type=None)
                ledger.replied(entry, r.status, data)
                if op == "acquire":
                    result = (r.status, data)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            ledger.failed(entry, type(exc).__name__)
    return result


def _code(reply: Any) -> str | None:
    if isinstance(reply, dict) and isinstance(reply.get("error"), dict):
        return str(reply["error"].get("code"))
    return None


@pytest.mark.fault("(d) data dir on a small tmpfs filled to the brim under load")
async def test_disk_full_under_load(
    row: Row,
    start_coordinator: StartCoordinator,
    small_disk: Callable[[str], SmallDisk],
    tmp_path: Path,
) -> None:
    s = seed()
    disk = small_disk(DISK_SIZE)
    srv = _start(start_coordinator, disk, tmp_path)
    data = disk.inside(disk.mountpoint / "data")
    target = Target([srv.url], srv.token)
    load = base_load(target, Settings(op_deadline=FULL_SECONDS + 60), seed=s)
    probes: list[tuple[int | None, Any]] = []
    ready_full: list[tuple[int | None, Any]] = []
    try:
        async with aiohttp.ClientSession() as session:
            await asyncio.sleep(random.Random(s).uniform(1.5, 3.0))
            filled = await asyncio.to_thread(disk.fill)
            full = load.ledger.mark("full")
            end = time.monotonic() + FULL_SECONDS
            i = 0
            while time.monotonic() < end:
                await asyncio.to_thread(disk.fill)  # whatever the server freed: taken again
                probes.append(await _probe_new_lane(session, target, load.ledger, f"solo:n{i}"))
                ready_full.append(await readyz(srv.url))
                i += 1
                await asyncio.sleep(0.5)
            left = disk.free_bytes()
            disk.free()
            freed = load.ledger.mark("freed")
            ready_after: tuple[int | None, Any] = (None, None)
            for _ in range(50):  # /readyz probes the disk at most once a second
                ready_after = await readyz(srv.url)
                if ready_after[0] == 200:
                    break
                await asyncio.sleep(0.2)
            await asyncio.sleep(pick(3.0, 8.0))
            after_free = await _probe_new_lane(session, target, load.ledger, "solo:after")
            lanes_after = srv.request("GET", "/v1/lanes")[1]["lanes"]
    finally:
        await load.finish()
    report = await load.verify(lanes=load.ledger.lanes)
    during = [e for e in load.ledger.snapshot() if full <= e.sent_at <= freed]
    refused = [e for e in during if e.status == 503]
    other_5xx = [
        e for e in load.ledger.snapshot() if e.status and e.status >= 500 and e.status != 503
    ]
    commit_failed = srv.events("lane.commit_failed")
    named = [e for e in commit_failed if any(c in json.dumps(e) for c in CAUSES)]
    row.report(report)
    row.note(
        f"{filled // 1024} KiB filled, {left} B left; {len(refused)} of {len(during)} attempts "
        f"while full answered 503 unavailable, new lanes 503 "
        f"{sum(1 for p in probes if p[0] == 503)}/{len(probes)}, /readyz "
        f"{sorted({r[0] for r in ready_full}, key=str)} while full, {ready_after[0]} after; "
        f"recovered without restart ({load.ledger.acknowledged_after(freed)} acks after); "
        f"log: {len(commit_failed)} lane.commit_failed, {len(named)} naming the cause; "
        f"seed {s}"
    )
    broken_after = {x["lane"]: x["error"] for x in lanes_after if x.get("error")}
    print(f"\n{report.summary('disk-full')}")
    assert_clean(report, load, [srv])
    assert srv.proc.poll() is None, "the server exited"
    assert refused, "nothing was refused while the disk was full: was it full?"
    assert all(_code(e.reply) == "unavailable" for e in refused), [e.reply for e in refused][:3]
    assert not other_5xx, [(e.status, e.reply) for e in other_5xx][:5]
    assert probes and all(p[0] == 503 and _code(p[1]) == "unavailable" for p in probes), probes
    assert any("ENOSPC" in json.dumps(p[1]) for p in probes), probes[:3]
    # /readyz probes the disk at most once a second: from then on it must say 503
    assert ready_full[-1][0] == 503 and "No space" in json.dumps(ready_full[-1][1]), ready_full
    assert ready_after[0] == 200, ready_after
    assert load.ledger.acknowledged_after(freed) > 0, "no write acknowledged once space was back"
    assert after_free[0] == 200, after_free  # a new lane can be created again
    assert not broken_after, f"lanes still reported broken once space was back: {broken_after}"
    names = sorted(p.name for p in data.iterdir())
    assert not [n for n in names if ".tmp-" in n], names  # failed first opens left nothing
    made = {f"solo+n{k}.sqlite" for k in range(len(probes))}
    assert not made & set(names), names  # a lane refused on a full disk has no file
    assert_no_traceback([srv])


async def _commit_until_refused(srv: CoordinatorProcess, seconds: float) -> list[Any]:
    """Acquire and release on one lane (with growing notes) until a 503; the 503 bodies."""
    headers = {"Authorization": f"Bearer {srv.token}"}
    refused: list[Any] = []
    end = time.monotonic() + seconds
    n = 0
    async with aiohttp.ClientSession(headers=headers) as s:
        while time.monotonic() < end and not refused:
            n += 1
            body = {"protocolVersion": 1, "lane": "duo:disk", "machineId": "m", "project": "p",
                    "scene": str(n), "promptHash": "h"}  # fmt: skip
            async with s.post(f"{srv.url}/v1/lanes/acquire", json=body) as r:
                got = await r.json()
                if r.status == 503:
                    refused.append(got)
                    break
            rel = {"protocolVersion": 1, "lane": "duo:disk", "machineId": "m",
                   "ticketId": got["ticket"]["ticketId"], "note": "x" * 500}  # fmt: skip
            async with s.post(f"{srv.url}/v1/lanes/release", json=rel) as r:
                if r.status == 503:
                    refused.append(await r.json())
    return refused


@pytest.mark.fault("(d2) disk full: the log names the cause of a failed commit")
async def test_disk_full_cause_is_in_the_log(
    row: Row,
    start_coordinator: StartCoordinator,
    small_disk: Callable[[str], SmallDisk],
    tmp_path: Path,
) -> None:
    disk = small_disk("16m")
    srv = _start(start_coordinator, disk, tmp_path)
    assert srv.op("acquire", {"lane": "duo:disk", "machineId": "m", "project": "p",
                              "scene": "0", "promptHash": "h"})  # fmt: skip
    await asyncio.to_thread(disk.fill)
    refused = await _commit_until_refused(srv, 20)
    if not refused:
        pytest.fail("no write was refused on a full disk: the fault was not produced")
    await asyncio.sleep(0.3)  # let the log lines land
    disk.free()
    failed = srv.events("lane.commit_failed")
    row.note(f"503 bodies: {refused[:1]}; lane.commit_failed lines: {failed[:1]}")
    assert_no_traceback([srv])
    assert failed, "no lane.commit_failed line for a commit refused on a full disk"
    assert any(c in json.dumps(e) for e in failed for c in CAUSES), failed[:3]


def _late_acquire(ledger: Ledger, srv: CoordinatorProcess) -> tuple[int, Any]:
    """One acquire on `solo:fa`, in the ledger (an acknowledged one must survive too)."""
    body = {"protocolVersion": 1, "lane": "solo:fa", "machineId": "late", "project": "p",
            "scene": "late", "promptHash": "h"}  # fmt: skip
    entry = ledger.sent("late", "acquire", "solo:fa", body, target=srv.url)
    status, reply = srv.request("POST", "/v1/lanes/acquire", body=body)
    ledger.replied(entry, status, reply)
    return status, reply


@pytest.mark.parametrize(
    "stop",
    [
        pytest.param(
            "kill9",
            marks=pytest.mark.fault("(d3) startup on a full disk after kill -9: reads served"),
        ),
        pytest.param(
            "sigterm",
            marks=pytest.mark.fault("(d3) startup on a full disk after a clean stop: reads served"),
        ),
    ],
)
async def test_startup_on_a_full_disk_serves_reads(
    stop: str,
    row: Row,
    start_coordinator: StartCoordinator,
    small_disk: Callable[[str], SmallDisk],
    tmp_path: Path,
) -> None:
    s = seed()
    disk = small_disk(DISK_SIZE)
    first = _start(start_coordinator, disk, tmp_path)
    target = Target([first.url], first.token)
    load = base_load(target, seed=s)
    await asyncio.sleep(2.0)
    await load.finish()
    if stop == "kill9":
        first.kill9()
    else:
        assert first.stop() == 0
    await asyncio.to_thread(disk.fill)
    srv = _start(start_coordinator, disk, tmp_path)  # it must start on a full disk
    ready = await readyz(srv.url)
    acquire = _late_acquire(load.ledger, srv)  # may fit in a WAL that is already there
    status, lanes = srv.request("GET", "/v1/lanes")
    errors = {x["lane"]: x.get("error") for x in lanes.get("lanes", [])} if status == 200 else {}
    row.note(
        f"after {stop}: /readyz {ready[0]}, an acquire {acquire[0]} "
        f"{_code(acquire[1]) or ''}, /v1/lanes {status} (lane errors {errors})"
    )
    try:
        views = await read_views(srv.url, srv.token, load.lanes)  # status and history
    finally:
        disk.free()
    report = check(load.ledger, views)
    assert_clean(report, load, [first, srv])
    assert ready[0] == 503, ready  # not ready for writes: no space
    assert acquire[0] == 200 or (acquire[0] == 503 and _code(acquire[1]) == "unavailable")
    assert status == 200 and not any(errors.values()), (status, lanes)
    await asyncio.sleep(1.5)
    again = _late_acquire(load.ledger, srv)
    assert again[0] == 200, again  # space back: writes again, no restart
    report = check(load.ledger, await read_views(srv.url, srv.token, load.lanes))
    row.report(report)
    assert_clean(report, load, [first, srv])
    assert_no_traceback([first, srv])
