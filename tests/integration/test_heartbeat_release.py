"""docs/protocol.md#heartbeat and docs/protocol.md#release, over HTTP against the real server."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.integration.kit import DUO, SOLO, acquire_body, assert_error, ticket_body

if TYPE_CHECKING:
    from tests.harness import Running

HB_KEYS = {"coordinator", "refreshed", "state", "leaseExpiresAt", "fence", "reason"}
REL_KEYS = {"coordinator", "released", "state", "outcome", "promoted", "reason"}


async def _acquire(server: Running, **kw: Any) -> dict[str, Any]:
    r = await server.ok("acquire", acquire_body(**kw))
    t: dict[str, Any] = r["ticket"]
    return t


# ---------------------------------------------------------------- heartbeat


async def test_heartbeat_refreshes_a_held_lease(server: Running) -> None:
    t = await _acquire(server, leaseSeconds=60)
    server.clock.advance(40)
    r = await server.ok("heartbeat", ticket_body(SOLO, t["ticketId"]))
    assert set(r) == HB_KEYS
    now = server.clock.now()
    assert r == {
        "coordinator": "actor-sqlite",
        "refreshed": True,
        "state": "held",
        "leaseExpiresAt": now + 60,
        "fence": t["fence"],
        "reason": None,
    }
    r = await server.ok("heartbeat", ticket_body(SOLO, t["ticketId"], leaseSeconds=120))
    assert r["leaseExpiresAt"] == now + 120
    st = await server.ok("status", {"lane": SOLO})
    assert st["held"][0]["heartbeatAt"] == now
    assert st["held"][0]["leaseExpiresAt"] == now + 120


async def test_heartbeats_keep_a_short_lease_alive_past_its_first_expiry(server: Running) -> None:
    t = await _acquire(server, leaseSeconds=15)
    for _ in range(4):
        server.clock.advance(10)
        r = await server.ok("heartbeat", ticket_body(SOLO, t["ticketId"]))
        assert r["refreshed"] is True
    st = await server.ok("status", {"lane": SOLO})
    assert [h["ticketId"] for h in st["held"]] == [t["ticketId"]]


async def test_heartbeat_lease_seconds_bounds(server: Running) -> None:
    t = await _acquire(server)
    for bad in (14, 3601, "x"):
        r = await server.op("heartbeat", ticket_body(SOLO, t["ticketId"], leaseSeconds=bad))
        assert_error(r, 400, "bad-request", "leaseSeconds")


async def test_heartbeat_on_a_queued_ticket_is_not_held_and_keeps_it_alive(
    server: Running,
) -> None:
    timeout = server.config.waiter_timeout_seconds
    await _acquire(server, leaseSeconds=3600)
    q = await _acquire(server, machine="mB", claim="cB", prompt="h2")
    for _ in range(3):
        server.clock.advance(timeout - 1)
        r = await server.ok("heartbeat", ticket_body(SOLO, q["ticketId"], "mB", "cB"))
        assert (r["refreshed"], r["state"], r["reason"]) == (False, "queued", "not-held")
        assert r["leaseExpiresAt"] is None and r["fence"] is None
    st = await server.ok("status", {"lane": SOLO})
    assert [x["ticketId"] for x in st["queued"]] == [q["ticketId"]]


async def test_acquire_retry_keeps_a_waiter_alive(server: Running) -> None:
    timeout = server.config.waiter_timeout_seconds
    await _acquire(server, leaseSeconds=3600)
    q = await _acquire(server, machine="mB", claim="cB", prompt="h2")
    for _ in range(3):
        server.clock.advance(timeout - 1)
        r = await server.ok("acquire", acquire_body(machine="mB", claim="cB", prompt="h2"))
        assert r["ticket"]["ticketId"] == q["ticketId"] and r["ticket"]["state"] == "queued"
    server.clock.advance(timeout)
    st = await server.ok("status", {"lane": SOLO})
    assert st["queued"] == []
    inc = await server.get("/v1/incidents", params={"lane": SOLO})
    assert "waiter-abandoned" in [i["kind"] for i in inc["incidents"]]


async def test_heartbeat_on_an_expired_lease(server: Running) -> None:
    t = await _acquire(server, leaseSeconds=15)
    server.clock.advance(15)
    r = await server.ok("heartbeat", ticket_body(SOLO, t["ticketId"]))
    assert (r["refreshed"], r["state"], r["reason"]) == (False, "expired", "expired")
    assert r["leaseExpiresAt"] is None


async def test_heartbeat_on_a_done_ticket(server: Running) -> None:
    t = await _acquire(server)
    await server.ok("release", ticket_body(SOLO, t["ticketId"], outcome="completed"))
    r = await server.ok("heartbeat", ticket_body(SOLO, t["ticketId"]))
    assert (r["refreshed"], r["state"], r["reason"]) == (False, "done", "done")


async def test_heartbeat_owner_rule(server: Running) -> None:
    t = await _acquire(server, leaseSeconds=60)
    before = t["leaseExpiresAt"]
    server.clock.advance(10)
    for machine, claim in (("mB", "cA"), ("mB", None), ("mA", "cOther")):
        r = await server.ok("heartbeat", ticket_body(SOLO, t["ticketId"], machine, claim))
        assert (r["refreshed"], r["reason"]) == (False, "not-owner"), (machine, claim)
    st = await server.ok("status", {"lane": SOLO})
    assert st["held"][0]["leaseExpiresAt"] == before  # nothing changed
    # no claimId: the machine alone decides (a hand heartbeat from the same computer)
    r = await server.ok("heartbeat", ticket_body(SOLO, t["ticketId"], "mA", None))
    assert r["refreshed"] is True and r["leaseExpiresAt"] == server.clock.now() + 60


async def test_heartbeat_unknown_ticket_is_404(server: Running) -> None:
    await _acquire(server)
    assert_error(await server.op("heartbeat", ticket_body(SOLO, "t_unknown")), 404, "not-found")
    assert_error(await server.op("heartbeat", ticket_body(DUO, "t_unknown")), 404, "not-found")


# ---------------------------------------------------------------- release


async def test_release_held_promotes_the_next_waiter_in_the_same_step(server: Running) -> None:
    a = await _acquire(server)
    b = await _acquire(server, machine="mB", claim="cB", prompt="h2")
    r = await server.ok(
        "release",
        ticket_body(SOLO, a["ticketId"], outcome="completed", providerJobId="job-1", note="ok"),
    )
    assert set(r) == REL_KEYS
    assert r["released"] is True and r["state"] == "done" and r["outcome"] == "completed"
    assert r["reason"] is None and r["promoted"] == [b["ticketId"]]
    st = await server.ok("status", {"lane": SOLO})
    assert [h["ticketId"] for h in st["held"]] == [b["ticketId"]]
    assert st["held"][0]["fence"] == a["fence"] + 1
    hist = await server.ok("history", {"lane": SOLO})
    row = hist["entries"][0]
    assert row["ticketId"] == a["ticketId"]
    assert (row["outcome"], row["providerJobId"], row["note"]) == ("completed", "job-1", "ok")


async def test_release_on_a_capacity_two_lane_promotes_in_order(server: Running) -> None:
    h1 = await _acquire(server, lane=DUO, prompt="1")
    h2 = await _acquire(server, lane=DUO, prompt="2")
    q1 = await _acquire(server, lane=DUO, prompt="3")
    q2 = await _acquire(server, lane=DUO, prompt="4")
    r = await server.ok("release", ticket_body(DUO, h2["ticketId"], outcome="failed"))
    assert r["promoted"] == [q1["ticketId"]]
    r = await server.ok("release", ticket_body(DUO, h1["ticketId"], outcome="timeout"))
    assert r["promoted"] == [q2["ticketId"]]


async def test_release_queued_by_its_owner(server: Running) -> None:
    await _acquire(server)
    q = await _acquire(server, machine="mB", claim="cB", prompt="h2")
    r = await server.ok(
        "release", ticket_body(SOLO, q["ticketId"], "mB", "cB", outcome="abandoned")
    )
    assert (r["released"], r["state"], r["outcome"], r["promoted"], r["reason"]) == (
        True,
        "done",
        "abandoned",
        [],
        None,
    )
    st = await server.ok("status", {"lane": SOLO})
    assert st["queued"] == []
    hist = await server.ok("history", {"lane": SOLO})
    assert hist["entries"][0]["heldAt"] is None and hist["entries"][0]["holdSeconds"] is None


async def test_late_release_after_expiry_keeps_expired_and_records_late_outcome(
    server: Running,
) -> None:
    t = await _acquire(server, leaseSeconds=15)
    server.clock.advance(20)
    r = await server.ok(
        "release", ticket_body(SOLO, t["ticketId"], outcome="completed", providerJobId="j9")
    )
    assert (r["released"], r["state"], r["outcome"], r["reason"]) == (
        False,
        "done",
        "expired",
        "expired",
    )
    assert r["promoted"] == []
    hist = await server.ok("history", {"lane": SOLO})
    [row] = hist["entries"]
    assert row["outcome"] == "expired" and row["lateOutcome"] == "completed"
    assert row["providerJobId"] == "j9"
    assert row["endedAt"] == t["leaseExpiresAt"]
    # the second late release: already done
    r = await server.ok("release", ticket_body(SOLO, t["ticketId"], outcome="failed"))
    assert (r["released"], r["state"], r["outcome"], r["reason"]) == (
        False,
        "done",
        "expired",
        "already-done",
    )
    hist = await server.ok("history", {"lane": SOLO})
    assert hist["entries"][0]["lateOutcome"] == "completed"
    inc = await server.get("/v1/incidents", params={"lane": SOLO})
    kinds = [i["kind"] for i in inc["incidents"]]
    assert "lease-expired" in kinds and "late-release" in kinds


async def test_release_already_done_changes_nothing(server: Running) -> None:
    t = await _acquire(server)
    await server.ok("release", ticket_body(SOLO, t["ticketId"], outcome="completed", note="n1"))
    server.clock.advance(5)
    r = await server.ok("release", ticket_body(SOLO, t["ticketId"], outcome="failed", note="n2"))
    assert (r["released"], r["state"], r["outcome"], r["reason"]) == (
        False,
        "done",
        "completed",
        "already-done",
    )
    hist = await server.ok("history", {"lane": SOLO})
    [row] = hist["entries"]
    assert (row["outcome"], row["note"], row["lateOutcome"]) == ("completed", "n1", None)


async def test_release_by_non_owner_changes_nothing(server: Running) -> None:
    t = await _acquire(server)
    for machine, claim in (("mB", "cB"), ("mB", None), ("mA", "cOther")):
        r = await server.ok(
            "release", ticket_body(SOLO, t["ticketId"], machine, claim, outcome="failed")
        )
        assert (r["released"], r["reason"], r["promoted"]) == (False, "not-owner", [])
        assert r["state"] == "held"
    st = await server.ok("status", {"lane": SOLO})
    assert [h["ticketId"] for h in st["held"]] == [t["ticketId"]]


async def test_hand_release_from_the_same_machine_without_claim(server: Running) -> None:
    t = await _acquire(server)
    r = await server.ok("release", ticket_body(SOLO, t["ticketId"], "mA", None))
    assert r["released"] is True and r["outcome"] is None


async def test_release_field_validation(server: Running) -> None:
    t = await _acquire(server)
    tid = t["ticketId"]
    for kw, name in (
        ({"outcome": "expired"}, "outcome"),  # coordinator-only outcome
        ({"outcome": "done"}, "outcome"),
        ({"outcome": 3}, "outcome"),
        ({"providerJobId": "j" * 257}, "providerJobId"),
        ({"note": "n" * 501}, "note"),
    ):
        r = await server.op("release", ticket_body(SOLO, tid, **kw))
        assert_error(r, 400, "bad-request", name)
    ok = await server.ok(
        "release", ticket_body(SOLO, tid, outcome=None, providerJobId="j" * 256, note="n" * 500)
    )
    assert ok["released"] is True


async def test_release_unknown_ticket_is_404(server: Running) -> None:
    await _acquire(server)
    assert_error(await server.op("release", ticket_body(SOLO, "t_unknown")), 404, "not-found")


async def test_every_release_outcome_is_accepted(server: Running) -> None:
    outcomes = [
        "completed",
        "failed",
        "timeout",
        "lease-lost",
        "not-submitted",
        "slot-busy",
        "abandoned",
    ]
    for i, outcome in enumerate(outcomes):
        t = await _acquire(server, prompt=f"o{i}")
        r = await server.ok("release", ticket_body(SOLO, t["ticketId"], outcome=outcome))
        assert r["released"] is True and r["outcome"] == outcome
    hist = await server.ok("history", {"lane": SOLO})
    assert hist["counts"] == dict.fromkeys(outcomes, 1)
