"""Cooldown (lane pause, docs/protocol.md#cooldown), over HTTP against the real server."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.kit import DUO, SOLO, acquire_body, assert_error, ticket_body

if TYPE_CHECKING:
    from tests.harness import Running

REASON = "provider-human-check"


def _cd(
    lane: str,
    tid: str,
    seconds: Any = 120,
    machine: str = "mA",
    claim: str | None = "cA",
    **kw: Any,
) -> dict[str, Any]:
    return ticket_body(
        lane, tid, machine, claim, reasonCode=REASON, retryAfterSeconds=seconds, **kw
    )


async def _tid(server: Running, **kw: Any) -> str:
    r = await server.ok("acquire", acquire_body(**kw))
    tid: str = r["ticket"]["ticketId"]
    return tid


async def test_cooldown_pauses_the_lane(server: Running) -> None:
    tid = await _tid(server)
    now = server.clock.now()
    r = await server.ok("cooldown", _cd(SOLO, tid, 120))
    assert set(r) == {"coordinator", "paused", "extended", "pause"}
    assert r["paused"] is True and r["extended"] is False
    assert r["pause"] == {
        "reasonCode": REASON,
        "startedAt": now,
        "until": now + 120,
        "machineId": "mA",
        "claimId": "cA",
        "ticketId": tid,
        "credential": "token-1",  # the plain TOKEN's name
    }
    st = await server.ok("status", {"lane": SOLO})
    assert st["pause"] == r["pause"]
    inc = await server.get("/v1/incidents", params={"lane": SOLO})
    assert [i["kind"] for i in inc["incidents"]] == ["provider-cooldown-started"]


async def test_a_longer_report_replaces_a_shorter_one_never_the_reverse(server: Running) -> None:
    a = await _tid(server, lane=DUO, prompt="a")
    b = await _tid(server, lane=DUO, prompt="b", machine="mB", claim="cB")
    t0 = server.clock.now()
    await server.ok("cooldown", _cd(DUO, a, 300))
    server.clock.advance(10)
    shorter = await server.ok("cooldown", _cd(DUO, b, 60, "mB", "cB"))
    assert shorter["paused"] is True and shorter["extended"] is False
    assert shorter["pause"]["until"] == t0 + 300 and shorter["pause"]["ticketId"] == a
    longer = await server.ok("cooldown", _cd(DUO, b, 600, "mB", "cB"))
    assert longer["extended"] is True
    assert longer["pause"]["until"] == t0 + 10 + 600 and longer["pause"]["ticketId"] == b
    st = await server.ok("status", {"lane": DUO})
    assert st["pause"]["until"] == t0 + 610


async def test_an_extension_keeps_the_pause_start_and_records_when_it_was_extended(
    server: Running,
) -> None:
    a = await _tid(server, lane=DUO, prompt="a")
    b = await _tid(server, lane=DUO, prompt="b", machine="mB", claim="cB")
    t0 = server.clock.now()
    started = await server.ok("cooldown", _cd(DUO, a, 300))
    server.clock.advance(10)
    longer = await server.ok("cooldown", _cd(DUO, b, 600, "mB", "cB"))
    assert longer["extended"] is True
    # the lane has been paused since t0: the extension moves `until`, never `startedAt`
    assert longer["pause"]["startedAt"] == started["pause"]["startedAt"] == t0
    assert longer["pause"]["until"] == t0 + 610 and longer["pause"]["ticketId"] == b
    st = await server.ok("status", {"lane": DUO})
    assert st["pause"] == longer["pause"]
    inc = (await server.get("/v1/incidents", params={"lane": DUO}))["incidents"]
    assert [i["kind"] for i in inc] == ["provider-cooldown-extended", "provider-cooldown-started"]
    ext = inc[0]
    assert ext["at"] == t0 + 10 and ext["ticketId"] == b and ext["machineId"] == "mB"
    assert ext["detail"]["extendedAt"] == t0 + 10
    assert ext["detail"]["until"] == t0 + 610
    assert ext["detail"]["previousUntil"] == t0 + 300
    assert ext["detail"]["startedAt"] == t0
    # when it ends, the pause lasted from its first start
    server.clock.set(t0 + 610)
    st = await server.ok("status", {"lane": DUO})
    assert st["pause"] is None
    inc = (await server.get("/v1/incidents", params={"lane": DUO}))["incidents"]
    assert inc[0]["kind"] == "provider-cooldown-ended"
    assert inc[0]["at"] == t0 + 610 and inc[0]["detail"]["startedAt"] == t0


async def test_while_paused_acquire_queues_with_the_pause_and_an_eta_including_it(
    server: Running,
) -> None:
    holder = await _tid(server)
    cd = await server.ok("cooldown", _cd(SOLO, holder, 900))
    rel = await server.ok("release", ticket_body(SOLO, holder, outcome="not-submitted"))
    assert rel["released"] is True and rel["promoted"] == []  # nothing promoted while paused
    server.clock.advance(100)
    r = await server.ok("acquire", acquire_body(machine="mB", claim="cB", prompt="new"))
    assert r["granted"] is False and r["ticket"]["state"] == "queued"
    assert r["pause"] == cd["pause"]
    pause_left = cd["pause"]["until"] - server.clock.now()
    assert r["ticket"]["etaSeconds"] >= pause_left == 800
    r2 = await server.ok("acquire", acquire_body(machine="mC", claim="cC", prompt="new2"))
    assert r2["ticket"]["position"] == 2
    assert r2["ticket"]["etaSeconds"] >= r["ticket"]["etaSeconds"]


async def test_the_alarm_ends_the_pause_and_promotes_with_no_client_call(server: Running) -> None:
    holder = await _tid(server)
    cd = await server.ok("cooldown", _cd(SOLO, holder, 60))
    await server.ok("release", ticket_body(SOLO, holder, outcome="not-submitted"))
    w = await server.ok("acquire", acquire_body(machine="mB", claim="cB", prompt="w"))
    wid = w["ticket"]["ticketId"]
    deadline = server.clock.now() + 60
    task = asyncio.create_task(
        server.op("await", ticket_body(SOLO, wid, "mB", "cB", waitSeconds=60))
    )
    await server.clock.until_sleeping(deadline)
    server.clock.advance(59)
    await asyncio.sleep(0.05)
    assert not task.done()
    server.clock.set(cd["pause"]["until"])
    r = await asyncio.wait_for(task, 10)
    # the pause ends and the waiter is promoted in the same step: the await reports both
    assert r["pause"] is None and r["granted"] is True
    st = await server.ok("status", {"lane": SOLO})
    assert [t["ticketId"] for t in st["held"]] == [wid]
    assert st["held"][0]["heldAt"] == cd["pause"]["until"]
    assert st["pause"] is None
    inc = await server.get("/v1/incidents", params={"lane": SOLO})
    kinds = [i["kind"] for i in inc["incidents"]]
    assert kinds[:2] == ["provider-cooldown-ended", "provider-cooldown-started"]
    ended = inc["incidents"][0]
    assert ended["at"] == cd["pause"]["until"]


async def test_await_reports_the_grant_at_pause_end(server: Running) -> None:
    holder = await _tid(server)
    cd = await server.ok("cooldown", _cd(SOLO, holder, 30))
    await server.ok("release", ticket_body(SOLO, holder, outcome="not-submitted"))
    w = await server.ok("acquire", acquire_body(machine="mB", claim="cB", prompt="w"))
    wid = w["ticket"]["ticketId"]
    server.clock.set(cd["pause"]["until"])
    r = await server.ok("await", ticket_body(SOLO, wid, "mB", "cB", waitSeconds=30))
    assert r["granted"] is True and r["pause"] is None


@pytest.mark.parametrize("state", ["queued", "done", "expired"])
async def test_only_a_held_ticket_may_pause(server: Running, state: str) -> None:
    holder = await _tid(server, leaseSeconds=15)
    tid = holder
    if state == "queued":
        tid = await _tid(server, prompt="q")
    elif state == "done":
        await server.ok("release", ticket_body(SOLO, holder, outcome="completed"))
    else:
        server.clock.advance(15)
    r = await server.op("cooldown", _cd(SOLO, tid))
    assert_error(r, 409, "ticket-not-held", "ticketId")
    st = await server.ok("status", {"lane": SOLO})
    assert st["pause"] is None


async def test_cooldown_by_another_owner_is_403(server: Running) -> None:
    tid = await _tid(server)
    for machine, claim in (("mB", "cB"), ("mB", None), ("mA", "cOther")):
        assert_error(
            await server.op("cooldown", _cd(SOLO, tid, 60, machine, claim)), 403, "not-owner"
        )
    st = await server.ok("status", {"lane": SOLO})
    assert st["pause"] is None
    r = await server.ok("cooldown", _cd(SOLO, tid, 60, "mA", None))  # machine alone decides
    assert r["paused"] is True


async def test_cooldown_unknown_ticket_is_404(server: Running) -> None:
    await _tid(server)
    assert_error(await server.op("cooldown", _cd(SOLO, "t_nope")), 404, "not-found")
    assert_error(await server.op("cooldown", _cd(DUO, "t_nope")), 404, "not-found")


async def test_cooldown_validation(server: Running) -> None:
    tid = await _tid(server)
    for seconds in (29, 7201, 0, -5, "60", None):
        assert_error(
            await server.op("cooldown", _cd(SOLO, tid, seconds)),
            400,
            "bad-request",
            "retryAfterSeconds",
        )
    body = _cd(SOLO, tid)
    body["reasonCode"] = "rate-limit"
    assert_error(await server.op("cooldown", body), 400, "bad-request", "reasonCode")
    del body["reasonCode"]
    assert_error(await server.op("cooldown", body), 400, "bad-request", "reasonCode")
    for seconds in (30, 7200):
        r = await server.ok("cooldown", _cd(SOLO, tid, seconds))
        assert r["paused"] is True
