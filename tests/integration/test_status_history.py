"""docs/protocol.md#status and docs/protocol.md#history, over HTTP against the real server."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.integration.kit import DUO, SOLO, acquire_body, assert_error, receipt_body, ticket_body

if TYPE_CHECKING:
    from tests.harness import Running

STATUS_KEYS = {"coordinator", "lane", "enforced", "capacity", "held", "queued", "pause", "now"}
RECEIPT_ROW_KEYS = {
    "receiptId",
    "ticketId",
    "phase",
    "machineId",
    "payload",
    "contentHash",
    "contentHashVerified",
    "createdAt",
    "credential",
}
HISTORY_ROW_KEYS = {
    "ticketId",
    "project",
    "scene",
    "promptHash",
    "machineId",
    "claimId",
    "outcome",
    "lateOutcome",
    "providerJobId",
    "note",
    "enqueuedAt",
    "heldAt",
    "endedAt",
    "waitSeconds",
    "holdSeconds",
}


async def _tid(server: Running, **kw: Any) -> str:
    r = await server.ok("acquire", acquire_body(**kw))
    tid: str = r["ticket"]["ticketId"]
    return tid


# ---------------------------------------------------------------- status


async def test_status_shape_without_receipt_keys(server: Running) -> None:
    held = await _tid(server)
    queued = await _tid(server, machine="mB", claim="cB", prompt="h2")
    await server.op("receipt", receipt_body(SOLO, held))
    st = await server.ok("status", {"lane": SOLO})
    assert set(st) >= STATUS_KEYS
    assert not [k for k in st if "receipt" in k.lower()], st.keys()
    assert st["coordinator"] == "actor-sqlite" and st["enforced"] is True
    assert st["capacity"] == 1 and st["pause"] is None and st["now"] == server.clock.now()
    assert [t["ticketId"] for t in st["held"]] == [held]
    assert [t["ticketId"] for t in st["queued"]] == [queued]
    assert st["held"][0]["position"] == 0 and st["queued"][0]["position"] == 1
    # the reply stays small: no history in it
    await server.ok("release", ticket_body(SOLO, held, outcome="completed"))
    st = await server.ok("status", {"lane": SOLO, "includeReceipts": False})
    assert held not in str(st["held"]) + str(st["queued"])
    assert "history" not in st and "entries" not in st
    assert not [k for k in st if "receipt" in k.lower()]


async def test_status_of_an_enforced_lane_never_used(server: Running) -> None:
    st = await server.ok("status", {"lane": DUO, "includeReceipts": True})
    assert st["enforced"] is True and st["capacity"] == 2
    assert st["held"] == [] and st["queued"] == [] and st["pause"] is None
    assert st["recentReceipts"] == []
    assert not server.lane_file(DUO).exists()  # a read creates no lane file


async def test_include_receipts_newest_first_at_most_50(server: Running) -> None:
    tid = await _tid(server)
    other = await _tid(server, lane=DUO, prompt="elsewhere")
    await server.op("receipt", receipt_body(DUO, other))  # another lane's receipt
    sent = []
    for i in range(55):
        server.clock.advance(1)
        body = receipt_body(SOLO, tid, phase="provider-submitted", payload={"i": i})
        r = await server.op("receipt", body)
        assert r.status == 201, r.text
        sent.append((body["receiptId"], server.clock.now()))
    st = await server.ok("status", {"lane": SOLO, "includeReceipts": True})
    rows = st["recentReceipts"]
    assert len(rows) == 50
    assert [r["receiptId"] for r in rows] == [rid for rid, _ in reversed(sent)][:50]
    assert [r["createdAt"] for r in rows] == [at for _, at in reversed(sent)][:50]
    assert set(rows[0]) == RECEIPT_ROW_KEYS
    assert rows[0]["payload"] == {"i": 54} and rows[0]["ticketId"] == tid
    assert rows[0]["phase"] == "provider-submitted" and rows[0]["machineId"] == "mA"
    assert rows[0]["contentHashVerified"] is True
    assert all(r["ticketId"] == tid for r in rows)


async def test_status_lists_queued_in_promotion_order_with_eta(server: Running) -> None:
    await _tid(server, lane=DUO, project="A", prompt="a0")
    await _tid(server, lane=DUO, project="A", prompt="a1")
    ids = [
        await _tid(server, lane=DUO, project=p, prompt=n)
        for p, n in (("A", "a2"), ("A", "a3"), ("B", "b1"), ("B", "b2"), ("C", "c1"))
    ]
    st = await server.ok("status", {"lane": DUO})
    a2, a3, b1, b2, c1 = ids
    assert [t["ticketId"] for t in st["queued"]] == [b1, c1, a2, b2, a3]
    etas = [t["etaSeconds"] for t in st["queued"]]
    assert etas == sorted(etas)
    assert etas[0] == etas[1] == server.config.default_hold_seconds  # 2 slots, 1 wave
    assert etas[2] == etas[3] == 2 * server.config.default_hold_seconds


async def test_status_validation(server: Running) -> None:
    for body, name in (
        ({"lane": SOLO, "includeReceipts": "yes"}, "includeReceipts"),
        ({"lane": SOLO, "machineId": "bad id!"}, "machineId"),
        ({}, "lane"),
        ({"lane": "SOLO:main"}, "lane"),
    ):
        assert_error(await server.op("status", body), 400, "bad-request", name)


# ---------------------------------------------------------------- history


async def test_history_newest_first_with_counts_and_fields(server: Running) -> None:
    t0 = server.clock.now()
    a = await _tid(server, project="P", prompt="a")
    b = await _tid(server, project="Q", prompt="b", machine="mB", claim="cB")
    server.clock.advance(10)
    await server.ok("release", ticket_body(SOLO, a, outcome="completed", providerJobId="j1"))
    server.clock.advance(25)
    await server.ok("release", ticket_body(SOLO, b, "mB", "cB"))  # no outcome: null
    c = await _tid(server, project="P", prompt="c", leaseSeconds=15)
    server.clock.advance(15)  # the alarm reaps c
    hist = await server.ok("history", {"lane": SOLO})
    assert hist["coordinator"] == "actor-sqlite"
    assert [e["ticketId"] for e in hist["entries"]] == [c, b, a]
    e_c, e_b, e_a = hist["entries"]
    assert set(e_a) >= HISTORY_ROW_KEYS
    assert e_a["outcome"] == "completed" and e_a["providerJobId"] == "j1"
    assert (e_a["enqueuedAt"], e_a["heldAt"], e_a["endedAt"]) == (t0, t0, t0 + 10)
    assert (e_a["waitSeconds"], e_a["holdSeconds"]) == (0, 10)
    assert e_b["outcome"] is None and e_b["lateOutcome"] is None
    assert (e_b["enqueuedAt"], e_b["heldAt"], e_b["endedAt"]) == (t0, t0 + 10, t0 + 35)
    assert (e_b["waitSeconds"], e_b["holdSeconds"]) == (10, 25)
    assert (e_b["machineId"], e_b["claimId"], e_b["project"]) == ("mB", "cB", "Q")
    assert e_c["outcome"] == "expired" and e_c["endedAt"] == t0 + 35 + 15
    assert e_c["holdSeconds"] == 15
    counts = hist["counts"]
    assert counts.get("completed") == 1 and counts.get("expired") == 1
    assert sum(counts.values()) == 3
    assert hist["retained"] == 3


async def test_history_project_filter_and_limit(server: Running) -> None:
    ids = []
    for i in range(7):
        tid = await _tid(server, project="P" if i % 2 else "Q", prompt=f"x{i}")
        server.clock.advance(1)
        outcome = "completed" if i < 5 else "failed"
        await server.ok("release", ticket_body(SOLO, tid, outcome=outcome))
        ids.append(tid)
    hist = await server.ok("history", {"lane": SOLO, "project": "P"})
    assert [e["ticketId"] for e in hist["entries"]] == [ids[5], ids[3], ids[1]]
    assert hist["counts"] == {"completed": 2, "failed": 1}
    hist = await server.ok("history", {"lane": SOLO, "limit": 2})
    assert [e["ticketId"] for e in hist["entries"]] == [ids[6], ids[5]]
    assert hist["counts"] == {"failed": 2}  # over the filtered window
    assert hist["retained"] == 7
    hist = await server.ok("history", {"lane": SOLO, "limit": 5000, "project": "nobody"})
    assert hist["entries"] == [] and hist["counts"] == {}
    hist = await server.ok("history", {"lane": SOLO, "limit": 1})
    assert len(hist["entries"]) == 1


async def test_history_limit_bounds(server: Running) -> None:
    for bad in (0, -1, 5001, 2.5, "10", None):
        r = await server.op("history", {"lane": SOLO, "limit": bad})
        assert_error(r, 400, "bad-request", "limit")
    for bad in ("", "p" * 129, 3):
        r = await server.op("history", {"lane": SOLO, "project": bad})
        assert_error(r, 400, "bad-request", "project")


async def test_history_of_an_unused_lane_is_empty(server: Running) -> None:
    hist = await server.ok("history", {"lane": DUO})
    assert hist["entries"] == [] and hist["counts"] == {}
    assert not server.lane_file(DUO).exists()


async def test_history_keeps_the_newest_rows_per_lane(start_server: Any) -> None:
    server = await start_server(history_retained=5)
    ids = []
    for i in range(8):
        tid = await _tid(server, prompt=f"r{i}")
        server.clock.advance(1)
        await server.ok("release", ticket_body(SOLO, tid, outcome="completed"))
        ids.append(tid)
    hist = await server.ok("history", {"lane": SOLO, "limit": 100})
    assert [e["ticketId"] for e in hist["entries"]] == ids[::-1][:5]
    assert hist["retained"] == 5
