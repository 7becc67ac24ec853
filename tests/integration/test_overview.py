"""GET /v1/overview: every lane in one bounded read, over HTTP against the real server.

The control room's periodic refresh is this one read (plus the evidence of the selected
ticket), whatever the number of lanes: each part of it must equal what the per-lane reads
(status, history, incidents, machines) answer, and every list in it is bounded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from coordinator import constants as C
from coordinator.protocol import constants as P
from tests.integration.kit import (
    DUO,
    SOLO,
    acquire_body,
    assert_error,
    receipt_body,
    ticket_body,
)

if TYPE_CHECKING:
    from tests.harness import Running


async def _ticket(server: Running, **kw: Any) -> dict[str, Any]:
    r = await server.ok("acquire", acquire_body(**kw))
    t: dict[str, Any] = r["ticket"]
    return t


async def _finish(server: Running, lane: str, n: int, project: str, outcome: str) -> None:
    """n renders of `project` in `lane`, each held then released (one clock second apart)."""
    for i in range(n):
        t = await _ticket(server, lane=lane, project=project, prompt=f"{project}-{i}")
        server.clock.advance(1)
        r = await server.ok("release", ticket_body(lane, t["ticketId"], outcome=outcome))
        assert r["released"], r


async def _overview(server: Running, **params: str) -> dict[str, Any]:
    r = await server.get("/v1/overview", params=params)
    assert r.status == 200, r.text
    assert isinstance(r.body, dict)
    return r.body


def _by_lane(reply: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {x["lane"]: x for x in reply["lanes"]}


async def test_one_read_equals_the_per_lane_reads(server: Running) -> None:
    await _finish(server, SOLO, 3, "alpha", "completed")
    await _finish(server, DUO, 2, "beta", "failed")
    held = await _ticket(server, lane=SOLO, project="alpha", prompt="held")
    await _ticket(server, lane=SOLO, project="gamma", prompt="waits", machine="mB", claim="cB")
    pause: dict[str, Any] = {"reasonCode": "provider-human-check", "retryAfterSeconds": 60}
    await server.ok("cooldown", ticket_body(SOLO, held["ticketId"], **pause))
    await server.op("receipt", receipt_body(SOLO, held["ticketId"]))

    r = await _overview(server)
    assert r["coordinator"] == "actor-sqlite"
    assert r["now"] == server.clock.now()
    assert r["limits"] == {
        "history": P.OVERVIEW_DEFAULT_HISTORY,
        "queued": P.OVERVIEW_DEFAULT_QUEUED,
        "receipts": P.OVERVIEW_DEFAULT_RECEIPTS,
        "incidents": P.DEFAULT_INCIDENTS_LIMIT,
        "limit": P.OVERVIEW_DEFAULT_LOG_LIMIT,
    }
    lanes = _by_lane(r)
    assert list(lanes) == sorted(lanes) and {SOLO, DUO} <= set(lanes)
    for lane in (SOLO, DUO):
        x = lanes[lane]
        status = await server.ok("status", {"lane": lane})
        for key in ("enforced", "capacity", "held", "queued", "queuedTotal", "pause", "now"):
            assert x[key] == status[key], (lane, key)
        history = await server.ok("history", {"lane": lane, "limit": P.OVERVIEW_DEFAULT_HISTORY})
        assert x["history"] == {"entries": history["entries"], "retained": history["retained"]}
    assert lanes[SOLO]["pause"]["ticketId"] == held["ticketId"]
    assert [t["project"] for t in lanes[SOLO]["queued"]] == ["gamma"]
    # each lane names its own projects only (served, live, in its render log)
    assert lanes[SOLO]["projects"] == ["alpha", "gamma"]
    assert lanes[DUO]["projects"] == ["beta"]
    # receipts: the newest, without their payload (a ticket's evidence has it)
    [rec] = lanes[SOLO]["recentReceipts"]
    assert rec["ticketId"] == held["ticketId"] and rec["contentHashVerified"] is True
    assert "payload" not in rec
    assert lanes[SOLO]["receiptMismatches"] == [] and lanes[DUO]["recentReceipts"] == []
    # incidents of every lane, newest first; machines as GET /v1/machines says
    incidents = await server.get("/v1/incidents")
    assert r["incidents"] == incidents["incidents"]
    assert [i["kind"] for i in r["incidents"]] == ["provider-cooldown-started"]
    machines = await server.get("/v1/machines")
    assert r["machines"] == machines["machines"]
    assert {m["machineId"] for m in r["machines"]} == {"mA", "mB"}
    # the render log of every lane, newest first, each row naming its lane
    log = r["log"]
    assert log["lane"] is None and log["project"] is None
    assert [e["lane"] for e in log["entries"]] == [DUO, DUO, SOLO, SOLO, SOLO]
    assert log["counts"] == {"completed": 3, "failed": 2}
    assert log["retained"] == 5 and log["retainedLimit"] == C.DEFAULT_HISTORY_RETAINED


async def test_render_log_of_the_chosen_lane_and_project(server: Running) -> None:
    await _finish(server, SOLO, 2, "alpha", "completed")
    await _finish(server, SOLO, 3, "beta", "timeout")
    await _finish(server, DUO, 4, "beta", "failed")

    r = await _overview(server, lane=SOLO, project="beta")
    history = await server.ok("history", {"lane": SOLO, "project": "beta", "limit": 100})
    log = r["log"]
    assert log["lane"] == SOLO and log["project"] == "beta"
    assert log["entries"] == [{"lane": SOLO, **e} for e in history["entries"]]
    assert log["counts"] == history["counts"] == {"timeout": 3}
    assert log["retained"] == 5
    # the timeline rows stay unfiltered, and the other lane is still there
    lanes = _by_lane(r)
    assert len(lanes[SOLO]["history"]["entries"]) == 5
    assert len(lanes[DUO]["history"]["entries"]) == 4

    r = await _overview(server, project="beta", limit="5")  # every lane, one project, cut at 5
    entries = r["log"]["entries"]
    assert len(entries) == 5 and {e["project"] for e in entries} == {"beta"}
    ended = [e["endedAt"] for e in entries]
    assert ended == sorted(ended, reverse=True)
    assert [e["lane"] for e in entries] == [DUO] * 4 + [SOLO]
    assert r["log"]["counts"] == {"failed": 4, "timeout": 1}
    assert r["log"]["retained"] == 9

    r = await _overview(server, lane="nobody:here")  # a lane with nothing: an empty log
    assert r["log"]["entries"] == [] and r["log"]["retained"] == 0


async def test_every_list_is_bounded_by_its_parameter(server: Running) -> None:
    await _finish(server, SOLO, 6, "alpha", "completed")
    held = await _ticket(server, lane=SOLO, prompt="held", leaseSeconds=3600)
    for i in range(4):
        await _ticket(server, lane=SOLO, prompt=f"q{i}", machine=f"m{i}", claim=None)
    for i in range(3):  # lease-expired incidents in DUO
        await _ticket(server, lane=DUO, prompt=f"d{i}", leaseSeconds=15)
    # one mismatched receipt, then more than `receipts` good ones after it
    bad = receipt_body(SOLO, held["ticketId"], content_hash="sha256:" + "0" * 64)
    assert (await server.op("receipt", bad)).status == 201
    for i in range(3):
        body = receipt_body(SOLO, held["ticketId"], phase="references-applied", payload={"i": i})
        server.clock.advance(0.001)
        assert (await server.op("receipt", body)).status == 201
    server.clock.advance(15)

    r = await _overview(server, history="2", queued="1", receipts="1", incidents="2", limit="3")
    assert r["limits"] == {"history": 2, "queued": 1, "receipts": 1, "incidents": 2, "limit": 3}
    x = _by_lane(r)[SOLO]
    assert len(x["history"]["entries"]) == 2 and x["history"]["retained"] == 6
    assert len(x["queued"]) == 1 and x["queuedTotal"] == 4
    [newest] = x["recentReceipts"]
    assert newest["phase"] == "references-applied"
    # a mismatch among the lane's recent receipts is always listed, whatever `receipts` is
    [mismatch] = x["receiptMismatches"]
    assert mismatch["contentHashVerified"] is False and mismatch["phase"] == "lease-acquired"
    assert len(r["incidents"]) == 2
    assert len(r["log"]["entries"]) == 3

    r = await _overview(server, history="0", queued="0", receipts="0")
    x = _by_lane(r)[SOLO]
    assert x["history"]["entries"] == [] and x["queued"] == [] and x["recentReceipts"] == []
    assert x["queuedTotal"] == 4 and len(x["receiptMismatches"]) == 1
    assert len(r["log"]["entries"]) == 8  # its own limit: 6 in solo, 2 expired in duo


async def test_bad_parameters_and_no_token(server: Running) -> None:
    for params, name in (
        ({"history": str(P.OVERVIEW_MAX_HISTORY + 1)}, "history"),
        ({"history": "-1"}, "history"),
        ({"queued": str(P.STATUS_QUEUED_LIMIT + 1)}, "queued"),
        ({"receipts": str(P.RECENT_RECEIPTS_LIMIT + 1)}, "receipts"),
        ({"incidents": "0"}, "incidents"),
        ({"limit": "0"}, "limit"),
        ({"limit": str(P.OVERVIEW_MAX_LOG_LIMIT + 1)}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"lane": "../etc:passwd"}, "lane"),
        ({"project": "p" * (P.MAX_IDENTITY_CHARS + 1)}, "project"),
    ):
        assert_error(await server.get("/v1/overview", params=params), 400, "bad-request", name)
    assert_error(await server.get("/v1/overview", token=None), 401, "unauthorized")


async def test_a_configured_lane_with_no_file_yet(start_server: Any) -> None:
    server = await start_server(lanes={"solo:spare": 3})
    r = await _overview(server)
    x = _by_lane(r)["solo:spare"]
    assert x["enforced"] is True and x["capacity"] == 3
    assert x["held"] == [] and x["queued"] == [] and x["pause"] is None
    assert x["history"] == {"entries": [], "retained": 0} and x["projects"] == []
