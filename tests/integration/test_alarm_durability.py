"""The alarm (docs/protocol.md#ticket-lifecycle, no client call needed) and durability
(docs/protocol.md#durability), against the real server's files."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.integration.kit import DUO, SOLO, acquire_body, receipt_body, ticket_body

if TYPE_CHECKING:
    from tests.harness import Running

TABLES = ("tickets", "receipts", "incidents", "pause", "projects", "meta")


def _snapshot(db: sqlite3.Connection) -> tuple[int, dict[str, int]]:
    """(data_version: changes when another connection commits, row count per table)."""
    counts = {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    return db.execute("PRAGMA data_version").fetchone()[0], counts


def _rows(path: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


async def test_alarm_promotes_the_waiter_at_lease_expiry_with_no_other_call(
    server: Running,
) -> None:
    a = await server.ok("acquire", acquire_body(leaseSeconds=15))
    b = await server.ok("acquire", acquire_body(machine="mB", claim="cB", prompt="h2"))
    aid, bid = a["ticket"]["ticketId"], b["ticket"]["ticketId"]
    expiry = a["ticket"]["leaseExpiresAt"]
    deadline = server.clock.now() + 60
    parked = asyncio.create_task(
        server.op("await", ticket_body(SOLO, bid, "mB", "cB", waitSeconds=60))
    )
    await server.clock.until_sleeping(deadline)
    server.clock.advance(14.999)
    await asyncio.sleep(0.1)
    assert not parked.done()
    server.clock.advance(0.001)  # the lease runs out: only the alarm acts
    r = await asyncio.wait_for(parked, 10)
    assert r.status == 200 and r["granted"] is True and r["ticket"]["ticketId"] == bid
    assert r["ticket"]["heldAt"] == expiry
    # the promotion is committed to the lane file (no client call made it)
    rows = _rows(
        server.lane_file(SOLO),
        "SELECT ticket_id, state, ended_at, outcome FROM tickets ORDER BY seq",
    )
    assert rows == [(aid, "expired", expiry, "expired"), (bid, "held", None, None)]
    st = await server.ok("status", {"lane": SOLO})
    assert [t["ticketId"] for t in st["held"]] == [bid]
    assert st["held"][0]["fence"] == a["ticket"]["fence"] + 1
    hist = await server.ok("history", {"lane": SOLO})
    assert [(e["ticketId"], e["outcome"], e["endedAt"]) for e in hist["entries"]] == [
        (aid, "expired", expiry)
    ]


async def test_alarm_promotes_with_status_as_the_only_observer(server: Running) -> None:
    a = await server.ok("acquire", acquire_body(lane=DUO, prompt="1", leaseSeconds=20))
    await server.ok("acquire", acquire_body(lane=DUO, prompt="2", leaseSeconds=3600))
    w = await server.ok("acquire", acquire_body(lane=DUO, prompt="3", machine="mW", claim="cW"))
    server.clock.advance(20)
    # the alarm acts by itself: watch the lane file (bounded real-time wait), no HTTP call
    path = server.lane_file(DUO)
    for _ in range(200):
        rows = dict(_rows(path, "SELECT ticket_id, state FROM tickets"))
        if rows[w["ticket"]["ticketId"]] == "held":
            break
        await asyncio.sleep(0.025)
    assert rows[a["ticket"]["ticketId"]] == "expired"
    assert rows[w["ticket"]["ticketId"]] == "held"
    st = await server.ok("status", {"lane": DUO})
    held = {t["ticketId"]: t for t in st["held"]}
    assert w["ticket"]["ticketId"] in held
    assert held[w["ticket"]["ticketId"]]["heldAt"] == a["ticket"]["leaseExpiresAt"]


async def test_a_reply_is_sent_only_after_its_change_is_committed(server: Running) -> None:
    path = server.lane_file(SOLO)
    a = await server.ok("acquire", acquire_body())
    tid = a["ticket"]["ticketId"]
    assert _rows(path, "SELECT state, fence FROM tickets WHERE ticket_id = ?", (tid,)) == [
        ("held", 1)
    ]
    r = await server.op("receipt", receipt_body(SOLO, tid))
    assert r.status == 201
    assert len(_rows(path, "SELECT 1 FROM receipts WHERE ticket_id = ?", (tid,))) == 1
    await server.ok(
        "cooldown", ticket_body(SOLO, tid, reasonCode="provider-human-check", retryAfterSeconds=90)
    )
    assert _rows(path, "SELECT ticket_id, until FROM pause") == [(tid, server.clock.now() + 90)]
    await server.ok("release", ticket_body(SOLO, tid, outcome="not-submitted"))
    assert _rows(path, "SELECT state, outcome FROM tickets WHERE ticket_id = ?", (tid,)) == [
        ("done", "not-submitted")
    ]


async def test_reads_and_keep_alives_never_write_a_row_per_call(server: Running) -> None:
    """status, await and history with nothing due commit nothing to the lane file."""
    held = await server.ok("acquire", acquire_body(leaseSeconds=3600))
    q = await server.ok("acquire", acquire_body(machine="mB", claim="cB", prompt="q"))
    done = await server.ok("acquire", acquire_body(prompt="d"))
    await server.ok("release", ticket_body(SOLO, done["ticket"]["ticketId"], "mA", "cA"))
    hid, qid = held["ticket"]["ticketId"], q["ticket"]["ticketId"]
    probe = sqlite3.connect(f"file:{server.lane_file(SOLO)}?mode=ro", uri=True)
    before = _snapshot(probe)
    for i in range(20):
        await server.ok("status", {"lane": SOLO, "includeReceipts": i % 2 == 0})
        await server.ok("history", {"lane": SOLO, "limit": 10})
        await server.ok("await", ticket_body(SOLO, hid, waitSeconds=5))  # held: answers at once
        if i % 5 == 0:  # a parked waiter's long poll that times out (its keep-alive)
            deadline = server.clock.now() + 1
            task = asyncio.create_task(
                server.op("await", ticket_body(SOLO, qid, "mB", "cB", waitSeconds=1))
            )
            await server.clock.until_sleeping(deadline)
            server.clock.advance(1)
            assert (await asyncio.wait_for(task, 10)).status == 200
        await server.get("/v1/lanes")
        await server.get("/v1/evidence", params={"lane": SOLO, "ticketId": hid})
    after = _snapshot(probe)
    assert after == before, (before, after)
    # the waiter is still queued (keep-alives live in memory)
    st = await server.ok("status", {"lane": SOLO})
    assert [t["ticketId"] for t in st["queued"]] == [qid]
    # the probe does see a real commit
    await server.ok("heartbeat", ticket_body(SOLO, hid))
    assert _snapshot(probe)[0] != before[0]
    probe.close()


async def test_lane_files_are_named_safely_and_one_per_lane(server: Running) -> None:
    await server.ok("acquire", acquire_body())
    await server.ok("acquire", acquire_body(lane=DUO))
    names = sorted(p.name for p in server.data_dir.iterdir() if p.suffix == ".sqlite")
    assert names == ["duo+main.sqlite", "solo+main.sqlite"]
