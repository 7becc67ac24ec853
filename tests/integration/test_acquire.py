"""docs/protocol.md#acquire and docs/protocol.md#fairness, over HTTP against the real server."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from tests.integration.kit import DUO, SOLO, TICKET_KEYS, acquire_body, assert_error, ticket_body

if TYPE_CHECKING:
    from tests.harness import Running


async def test_first_acquire_is_granted_with_the_full_reply_shape(server: Running) -> None:
    r = await server.ok("acquire", acquire_body())
    assert set(r) == {
        "coordinator",
        "lane",
        "enforced",
        "ticket",
        "granted",
        "duplicate",
        "owner",
        "pause",
    }
    assert r["coordinator"] == "actor-sqlite"
    assert r["lane"] == SOLO and r["enforced"] is True
    assert r["granted"] is True and r["duplicate"] is False and r["pause"] is None
    assert r["owner"] == {"machineId": "mA", "claimId": "cA"}
    t = r["ticket"]
    assert set(t) >= TICKET_KEYS
    # t_ + at least 128 random bits, url-safe (22 base64url characters carry 132 bits)
    assert re.fullmatch(r"t_[A-Za-z0-9_-]{22,}", t["ticketId"]), t["ticketId"]
    now = server.clock.now()
    assert t["state"] == "held" and t["position"] == 0 and t["etaSeconds"] == 0
    assert t["lane"] == SOLO and t["machineId"] == "mA" and t["claimId"] == "cA"
    assert (t["project"], t["scene"], t["promptHash"]) == ("p1", "s1", "h1")
    assert t["enqueuedAt"] == now and t["heldAt"] == now
    assert t["leaseExpiresAt"] == now + server.config.default_lease_seconds
    assert t["heartbeatAt"] is None
    assert t["fence"] == 1


async def test_lease_seconds_is_honoured_and_bounded(server: Running) -> None:
    r = await server.ok("acquire", acquire_body(leaseSeconds=15))
    assert r["ticket"]["leaseExpiresAt"] == server.clock.now() + 15
    for bad in (14, 14.9, 3601, -1, "60", True):
        assert_error(
            await server.op("acquire", acquire_body(prompt="h9", leaseSeconds=bad)),
            400,
            "bad-request",
            "leaseSeconds",
        )
    r = await server.ok("acquire", acquire_body(lane=DUO, leaseSeconds=3600))
    assert r["ticket"]["leaseExpiresAt"] == server.clock.now() + 3600


async def test_identity_fields_are_1_to_128_chars(server: Running) -> None:
    for name, kw in (("project", "project"), ("scene", "scene"), ("promptHash", "prompt")):
        for bad in ("", "x" * 129):
            assert_error(
                await server.op("acquire", acquire_body(**{kw: bad})), 400, "bad-request", name
            )
    r = await server.ok("acquire", acquire_body(project="p" * 128, scene="s" * 128))
    assert r["granted"] is True


async def test_second_request_queues_at_position_1(server: Running) -> None:
    a = await server.ok("acquire", acquire_body())
    b = await server.ok("acquire", acquire_body(machine="mB", claim="cB", prompt="h2"))
    assert b["granted"] is False and b["duplicate"] is False
    t = b["ticket"]
    assert t["state"] == "queued" and t["position"] == 1
    assert t["heldAt"] is None and t["leaseExpiresAt"] is None and t["fence"] is None
    assert t["etaSeconds"] > 0
    assert t["ticketId"] != a["ticket"]["ticketId"]
    assert b["owner"] == {"machineId": "mB", "claimId": "cB"}


async def test_capacity_two_grants_two(server: Running) -> None:
    r1 = await server.ok("acquire", acquire_body(lane=DUO, prompt="a"))
    r2 = await server.ok("acquire", acquire_body(lane=DUO, prompt="b"))
    r3 = await server.ok("acquire", acquire_body(lane=DUO, prompt="c"))
    assert [r["granted"] for r in (r1, r2, r3)] == [True, True, False]
    assert [r["ticket"]["fence"] for r in (r1, r2)] == [1, 2]
    assert r3["ticket"]["position"] == 1


async def test_non_owner_duplicate_is_told_the_owner_and_never_granted(server: Running) -> None:
    a = await server.ok("acquire", acquire_body())
    dup = await server.ok("acquire", acquire_body(machine="mB", claim="cB"))
    assert dup["duplicate"] is True and dup["granted"] is False
    assert dup["ticket"]["ticketId"] == a["ticket"]["ticketId"]
    assert dup["ticket"]["state"] == "held"
    assert dup["owner"] == {"machineId": "mA", "claimId": "cA"}
    # same machine, another claim: another driver, not the owner either
    other_claim = await server.ok("acquire", acquire_body(claim="cOther"))
    assert other_claim["duplicate"] is True and other_claim["granted"] is False
    assert other_claim["owner"] == {"machineId": "mA", "claimId": "cA"}


async def test_owner_retry_gets_the_same_ticket_back(server: Running) -> None:
    a = await server.ok("acquire", acquire_body())
    again = await server.ok("acquire", acquire_body())
    assert again["ticket"]["ticketId"] == a["ticket"]["ticketId"]
    assert again["duplicate"] is True and again["granted"] is True
    assert again["ticket"]["fence"] == a["ticket"]["fence"]  # not granted twice
    # a queued owner's retry: same queued ticket, still not granted
    q = await server.ok("acquire", acquire_body(machine="mB", claim="cB", prompt="h2"))
    q2 = await server.ok("acquire", acquire_body(machine="mB", claim="cB", prompt="h2"))
    assert q2["ticket"]["ticketId"] == q["ticket"]["ticketId"]
    assert q2["duplicate"] is True and q2["granted"] is False
    assert q2["ticket"]["state"] == "queued" and q2["ticket"]["position"] == 1


async def test_duplicate_of_a_queued_ticket_becomes_grantable_only_for_its_owner(
    server: Running,
) -> None:
    a = await server.ok("acquire", acquire_body())
    b = await server.ok("acquire", acquire_body(machine="mB", claim="cB", prompt="h2"))
    rel = await server.ok(
        "release", ticket_body(SOLO, a["ticket"]["ticketId"], outcome="completed")
    )
    assert rel["promoted"] == [b["ticket"]["ticketId"]]
    intruder = await server.ok("acquire", acquire_body(machine="mC", claim="cC", prompt="h2"))
    assert intruder["ticket"]["state"] == "held"
    assert intruder["duplicate"] is True and intruder["granted"] is False
    assert intruder["owner"] == {"machineId": "mB", "claimId": "cB"}
    owner = await server.ok("acquire", acquire_body(machine="mB", claim="cB", prompt="h2"))
    assert owner["granted"] is True and owner["duplicate"] is True


async def test_a_done_identity_can_be_requested_again(server: Running) -> None:
    a = await server.ok("acquire", acquire_body())
    await server.ok("release", ticket_body(SOLO, a["ticket"]["ticketId"], outcome="completed"))
    again = await server.ok("acquire", acquire_body())
    assert again["duplicate"] is False and again["granted"] is True
    assert again["ticket"]["ticketId"] != a["ticket"]["ticketId"]
    assert again["ticket"]["fence"] == 2


async def test_fence_increases_by_one_per_grant_and_never_repeats(server: Running) -> None:
    fences = []
    for i in range(6):
        r = await server.ok("acquire", acquire_body(prompt=f"f{i}"))
        fences.append(r["ticket"]["fence"])
        await server.ok("release", ticket_body(SOLO, r["ticket"]["ticketId"], outcome="completed"))
    assert fences == [1, 2, 3, 4, 5, 6]


async def test_racing_identical_acquires_converge_on_one_ticket(server: Running) -> None:
    """12 clients (distinct machines) race the same identity: one canonical ticket."""
    n = 12
    replies = await asyncio.gather(
        *(
            server.op("acquire", acquire_body(machine=f"m{i}", claim=f"c{i}", prompt="race"))
            for i in range(n)
        )
    )
    assert all(r.status == 200 for r in replies), [r.text for r in replies]
    ids = {r["ticket"]["ticketId"] for r in replies}
    assert len(ids) == 1, ids
    owners = {(r["owner"]["machineId"], r["owner"]["claimId"]) for r in replies}
    assert len(owners) == 1
    creators = [r for r in replies if r["duplicate"] is False]
    assert len(creators) == 1
    owner = owners.pop()
    assert (creators[0]["ticket"]["machineId"], creators[0]["ticket"]["claimId"]) == owner
    granted = [r for r in replies if r["granted"]]
    assert len(granted) == 1 and granted[0] is creators[0]
    status = await server.ok("status", {"lane": SOLO})
    assert [t["ticketId"] for t in status["held"]] == list(ids) and status["queued"] == []
    # the collision is recorded as coordinator evidence
    ev = await server.get("/v1/evidence", params={"lane": SOLO})
    coll = ev["coordinatorEvidence"]["collision"]
    assert coll["ticketId"] in ids
    assert coll["owner"] == {"machineId": owner[0], "claimId": owner[1]}


async def test_racing_identical_acquires_while_full_converge_and_nobody_is_granted(
    server: Running,
) -> None:
    await server.ok("acquire", acquire_body(prompt="holder"))
    replies = await asyncio.gather(
        *(
            server.op("acquire", acquire_body(machine=f"m{i}", claim=f"c{i}", prompt="race"))
            for i in range(10)
        )
    )
    assert len({r["ticket"]["ticketId"] for r in replies}) == 1
    assert not any(r["granted"] for r in replies)
    assert sum(1 for r in replies if not r["duplicate"]) == 1
    status = await server.ok("status", {"lane": SOLO})
    assert len(status["queued"]) == 1


async def test_one_owner_racing_its_own_retries_gets_one_ticket(server: Running) -> None:
    replies = await asyncio.gather(*(server.op("acquire", acquire_body()) for _ in range(8)))
    assert len({r["ticket"]["ticketId"] for r in replies}) == 1
    assert all(r["granted"] for r in replies)
    assert sum(1 for r in replies if not r["duplicate"]) == 1


async def test_promotion_order_is_least_recently_served_project_first(server: Running) -> None:
    """The example of docs/protocol.md#fairness: only A was granted; queued A1, A2, B1, C1, B2 ->
    B1, C1, A1, B2, A2."""
    a0 = await server.ok("acquire", acquire_body(project="A", prompt="a0"))
    ids = {}
    for name, project in (("A1", "A"), ("A2", "A"), ("B1", "B"), ("C1", "C"), ("B2", "B")):
        server.clock.advance(1)
        r = await server.ok("acquire", acquire_body(project=project, prompt=name))
        assert r["ticket"]["state"] == "queued"
        ids[r["ticket"]["ticketId"]] = name
    status = await server.ok("status", {"lane": SOLO})
    order = [ids[t["ticketId"]] for t in status["queued"]]
    assert order == ["B1", "C1", "A1", "B2", "A2"]
    assert [t["position"] for t in status["queued"]] == [1, 2, 3, 4, 5]
    etas = [t["etaSeconds"] for t in status["queued"]]
    assert etas == sorted(etas) and etas[0] > 0  # never decreases with position
    by_name = {v: k for k, v in ids.items()}

    rel = await server.ok("release", ticket_body(SOLO, a0["ticket"]["ticketId"]))
    assert rel["promoted"] == [by_name["B1"]]
    server.clock.advance(1)
    rel = await server.ok("release", ticket_body(SOLO, by_name["B1"], outcome="completed"))
    assert rel["promoted"] == [by_name["C1"]]  # "If B1 is then granted and released, C1 next"
    status = await server.ok("status", {"lane": SOLO})
    assert [ids[t["ticketId"]] for t in status["queued"]] == ["A1", "B2", "A2"]


async def test_position_in_acquire_reply_follows_the_simulated_order(server: Running) -> None:
    await server.ok("acquire", acquire_body(project="A", prompt="a0"))
    a1 = await server.ok("acquire", acquire_body(project="A", prompt="a1"))
    a2 = await server.ok("acquire", acquire_body(project="A", prompt="a2"))
    b1 = await server.ok("acquire", acquire_body(project="B", prompt="b1"))
    assert a1["ticket"]["position"] == 1 and a2["ticket"]["position"] == 2
    assert b1["ticket"]["position"] == 1  # B never served: goes before A1
    status = await server.ok("status", {"lane": SOLO})
    assert [t["ticketId"] for t in status["queued"]] == [
        b1["ticket"]["ticketId"],
        a1["ticket"]["ticketId"],
        a2["ticket"]["ticketId"],
    ]


async def test_a_duplicate_without_claim_from_the_owner_machine_is_not_granted(
    server: Running,
) -> None:
    """Owner = (machineId, claimId) of the creating acquire: a claimless acquire from the same
    computer (another driver, an older client) is a collision, told the owner, never granted."""
    a = await server.ok("acquire", acquire_body(machine="mA", claim="cA"))
    dup = await server.ok("acquire", acquire_body(machine="mA", claim=None))
    assert dup["ticket"]["ticketId"] == a["ticket"]["ticketId"]
    assert dup["duplicate"] is True and dup["granted"] is False
    assert dup["owner"] == {"machineId": "mA", "claimId": "cA"}
    ev = await server.get("/v1/evidence", params={"lane": SOLO})
    coll = ev["coordinatorEvidence"]["collision"]
    assert coll["requester"] == {"machineId": "mA", "claimId": None}
    # a ticket created without a claim: the same claimless retry is its owner
    b = await server.ok("acquire", acquire_body(machine="mB", claim=None, prompt="nc"))
    again = await server.ok("acquire", acquire_body(machine="mB", claim=None, prompt="nc"))
    assert again["ticket"]["ticketId"] == b["ticket"]["ticketId"] and again["duplicate"] is True
    assert again["owner"] == {"machineId": "mB", "claimId": None}
