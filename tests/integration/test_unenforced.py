"""Unenforced lanes (docs/protocol.md#unenforced: a route with no measured limit), over HTTP."""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING

from coordinator.protocol.names import lane_from_file_name
from tests.integration.kit import FREE, PHASES, TICKET_KEYS, acquire_body, receipt_body, ticket_body

if TYPE_CHECKING:
    from tests.harness import Running


async def test_acquire_grants_unlimited_tickets_at_once(server: Running) -> None:
    replies = [
        await server.ok("acquire", acquire_body(lane=FREE, machine=f"m{i}", prompt="same"))
        for i in range(5)
    ]
    for r in replies:
        assert r["coordinator"] == "actor-sqlite"
        assert r["enforced"] is False and r["granted"] is True and r["lane"] == FREE
        assert set(r["ticket"]) >= TICKET_KEYS
        tid = r["ticket"]["ticketId"]
        m = re.fullmatch(r"unlimited-(.+)", tid)
        assert m is not None, tid
        uuid.UUID(m.group(1))
    assert len({r["ticket"]["ticketId"] for r in replies}) == 5  # never held or deduplicated


async def test_ticket_calls_answer_true_and_nothing_is_stored(server: Running) -> None:
    r = await server.ok("acquire", acquire_body(lane=FREE))
    tid = r["ticket"]["ticketId"]
    hb = await server.ok("heartbeat", ticket_body(FREE, tid))
    assert hb["refreshed"] is True and hb["reason"] is None
    aw = await server.ok("await", ticket_body(FREE, tid, waitSeconds=30))
    assert aw["granted"] is True and aw["enforced"] is False
    # never null: the caller owns it, and the identity nothing remembers reads "unknown"
    t = aw["ticket"]
    assert (t["machineId"], t["claimId"]) == ("mA", "cA") == tuple(aw["owner"].values())
    assert (t["project"], t["scene"], t["promptHash"]) == ("unknown", "unknown", "unknown")
    rc = await server.op("receipt", receipt_body(FREE, tid))
    assert rc.status in (200, 201) and rc["stored"] is False
    rel = await server.ok("release", ticket_body(FREE, tid, outcome="completed"))
    assert rel["released"] is True and rel["reason"] is None
    # No lane file (the data dir holds its lock and the presence store, no lane).
    assert [p.name for p in server.data_dir.iterdir() if lane_from_file_name(p.name)] == []


async def test_status_has_no_receipt_keys_even_when_asked(server: Running) -> None:
    r = await server.ok("acquire", acquire_body(lane=FREE))
    await server.op("receipt", receipt_body(FREE, r["ticket"]["ticketId"]))
    for include in (False, True):
        st = await server.ok("status", {"lane": FREE, "includeReceipts": include})
        assert st["enforced"] is False
        assert st["held"] == [] and st["queued"] == []
        assert not [k for k in st if "receipt" in k.lower()], st
        assert st["coordinator"] == "actor-sqlite" and st["lane"] == FREE


async def test_history_of_an_unenforced_lane_is_empty(server: Running) -> None:
    r = await server.ok("acquire", acquire_body(lane=FREE))
    await server.ok("release", ticket_body(FREE, r["ticket"]["ticketId"], outcome="completed"))
    hist = await server.ok("history", {"lane": FREE})
    assert hist["entries"] == [] and hist["counts"] == {}


async def test_evidence_for_an_unlimited_ticket_reads_unknown(server: Running) -> None:
    r = await server.ok("acquire", acquire_body(lane=FREE))
    tid = r["ticket"]["ticketId"]
    await server.op("receipt", receipt_body(FREE, tid))
    ev = await server.get("/v1/evidence", params={"lane": FREE, "ticketId": tid})
    assert ev.status == 200 and ev["enforced"] is False
    job = ev["jobEvidence"]
    assert job["ticketId"] == tid and job["found"] is False
    assert job["identity"] == "unknown"
    assert job["receipts"] == dict.fromkeys(PHASES, "unknown")
    ev = await server.get("/v1/evidence", params={"lane": FREE})
    assert ev["jobEvidence"] is None
