"""`python -m client.example_driver` end to end, as a subprocess against the real
coordinator: the whole flow, a crash and its resume (under the in-flight hold of the crashed
run's ticket; on a new ticket when holds are off), a human check."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from client.api import LaneClient
from tests.harness import LineProcess, ThreadedCoordinator

from .kit import LANE, PY, REPO, last_json


def run_driver(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], str]:
    p = subprocess.run(
        [PY, "-m", "client.example_driver", "--lane", LANE, "--render-seconds", "0.2", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    summary = last_json(p.stdout) if "{" in p.stdout else {}
    return p.returncode, summary, p.stderr


async def test_example_driver_whole_flow(coord: ThreadedCoordinator, env: dict[str, str]) -> None:
    code, s, err = run_driver(coord.env(env))
    assert code == 0, err[-3000:]
    assert s["outcome"] == "completed" and s["released"] and s["providerJobId"]
    assert s["receipts"] == {
        "written": ["lease-acquired", "references-applied", "provider-submitted",
                    "provider-terminal"],
        "dropped": [],
    }  # fmt: skip
    assert s["provider"]["submitCalls"] == 1 and s["journal"]["phase"] == "terminal"
    async with LaneClient(coord.url, coord.token, "studio-a") as a:
        e = (await a.history(LANE)).entries[0]
        assert (e.ticket_id, e.outcome, e.provider_job_id, e.claim_id) == (
            s["ticketId"], "completed", s["providerJobId"], s["claim"]
        )  # fmt: skip
        st = await a.status(LANE, include_receipts=True)
        assert st.recent_receipts is not None and len(st.recent_receipts) == 4
        assert all(r.content_hash_verified for r in st.recent_receipts)
        for r in st.recent_receipts:  # hashes, ids and counts only
            text = msgspec.json.encode(r.payload).decode()
            assert "example prompt" not in text and "/" not in text


def _demo(coord: ThreadedCoordinator, env: dict[str, str], render: str) -> LineProcess:
    return LineProcess(
        [PY, "-m", "client.example_driver", "--lane", LANE, "--render-seconds", render,
         "--demo-crash"],
        coord.env(env),
    )  # fmt: skip


async def test_example_driver_demo_crash_resumes_under_the_in_flight_hold(
    coord: ThreadedCoordinator, env: dict[str, str]
) -> None:
    """--demo-crash: the first run submits and dies; its 15 s lease runs out (the ManualClock
    moves only here). The restarted run finds the old ticket in the lane's inFlight, acquires
    nothing, polls the job and writes provider-terminal on the old ticket: a waiter queued
    behind is promoted only then, never at the expiry; the job never waits for its own slot."""
    demo = _demo(coord, env, "4")  # the simulated job runs 4 s (wall clock) after its submit
    try:
        demo.wait_for_line(lambda ln: "simulated crash after submit" in ln, 120)
        async with LaneClient(coord.url, coord.token, "studio-b", "claim-b") as b:
            waiter = await b.acquire(LANE, "other", "scene-9", "sha256:" + "99" * 32)
            assert waiter.ticket.state == "queued" and waiter.ticket.position == 1
            demo.wait_for_line(lambda ln: "waiting for the crashed run's lease" in ln, 60)
            st = await b.status(LANE)
            [old] = [t.ticket_id for t in st.held]
            coord.advance(16)  # the crashed run's lease runs out: reaped, its job keeps the slot
            st = await b.status(LANE)
            expired_at = st.now
            assert [j.ticket_id for j in st.in_flight] == [old] and st.held == []
            assert [t.ticket_id for t in st.queued] == [waiter.ticket_id]  # not promoted
            coord.advance(10)  # any grant from here on is the provider-terminal receipt's
            assert demo.wait(120) == 0, demo.text[-3000:]
            s = last_json(demo.text)
            err = demo.text
            st = await b.status(LANE, include_receipts=True)
            hist = await b.history(LANE)
            inc = await b.incidents(LANE)
    finally:
        demo.kill()
    assert f"resumed under the in-flight hold of ticket {old}" in err, err[-3000:]
    assert "no new ticket acquired" in err
    assert f"provider-terminal written on the old ticket {old}" in err
    assert s["underHold"] and s["ticketId"] == old and s["resumed"] and not s["adopted"]
    assert s["holdUntil"] is not None and s["outcome"] is None and not s["released"]
    assert "provider-terminal" in s["receipts"]["written"]
    assert s["provider"]["submitCalls"] == 1  # the crashed run's submit only; never again
    # zero new acquires for that job: the window never had a ticket but the crashed run's
    window = [e.ticket_id for e in hist.entries if e.scene == "scene-1"]
    window += [t.ticket_id for t in (*st.held, *st.queued) if t.scene == "scene-1"]
    assert window == [old]
    [row] = [e for e in hist.entries if e.ticket_id == old]
    assert (row.outcome, row.in_flight_ended) == ("expired", "receipt")
    assert row.in_flight_until == s["holdUntil"] and row.ended_at is not None
    # the waiter was promoted by that receipt (10 s after the expiry), in its commit
    assert st.in_flight == [] and [t.ticket_id for t in st.held] == [waiter.ticket_id]
    held_at = st.held[0].held_at
    assert held_at is not None and held_at >= expired_at + 10
    assert st.recent_receipts is not None
    [terminal] = [r for r in st.recent_receipts
                  if r.ticket_id == old and r.phase == "provider-terminal"]  # fmt: skip
    assert terminal.created_at == held_at
    kinds = [i.kind for i in inc.incidents if i.ticket_id == old]
    assert "in-flight-held" in kinds and "in-flight-ended" in kinds


@pytest.mark.no_in_flight_holds
async def test_example_driver_demo_crash_without_a_hold_acquires_a_new_ticket(
    coord: ThreadedCoordinator, env: dict[str, str]
) -> None:
    """Holds off: nothing keeps the slot after the crashed run's lease, so the restart
    acquires a new ticket and resumes (polls) the job on it."""
    demo = _demo(coord, env, "0.2")
    try:
        demo.wait_for_line(lambda ln: "waiting for the crashed run's lease" in ln, 120)
        coord.advance(16)
        assert demo.wait(120) == 0, demo.text[-3000:]
    finally:
        demo.kill()
    s = last_json(demo.text)
    assert not s["underHold"] and not s["adopted"] and s["resumed"]
    assert s["outcome"] == "completed" and s["provider"]["submitCalls"] == 1
    assert "resumed under the in-flight hold" not in demo.text
    async with LaneClient(coord.url, coord.token, "studio-a") as a:
        hist = await a.history(LANE)
    got = {(e.ticket_id == s["ticketId"], e.outcome) for e in hist.entries}
    assert got == {(False, "expired"), (True, "completed")}


def test_example_driver_crash_during_submit_then_reconcile(
    coord: ThreadedCoordinator, env: dict[str, str], tmp_path: Path
) -> None:
    e = coord.env(env)
    code, _, err = run_driver(e, "--crash-at", "during-submit")
    assert code == 17, err[-3000:]
    code, s, err = run_driver(e)
    assert code == 0, err[-3000:]
    assert s["reconciled"] and s["resumed"] and s["outcome"] == "completed"
    assert s["provider"]["submitCalls"] == 1 and s["provider"]["findCalls"] == 1


async def test_example_driver_human_check(coord: ThreadedCoordinator, env: dict[str, str]) -> None:
    code, s, err = run_driver(coord.env(env), "--human-check")
    assert code == 0, err[-3000:]
    assert s["humanCheck"] and s["outcome"] == "not-submitted"
    assert "this machine (studio-a) paused lane drill:example" in err
    async with LaneClient(coord.url, coord.token, "studio-b") as b:
        st = await b.status(LANE)
        assert st.pause is not None and st.pause.machine_id == "studio-a"


def test_example_driver_on_the_local_queue(env: dict[str, str]) -> None:
    code, s, err = run_driver(env)  # no LANE_COORDINATOR_URL: the local queue
    assert code == 0, err[-3000:]
    assert "local single-computer queue" in err
    assert s["outcome"] == "completed" and s["receipts"] == {"written": [], "dropped": []}


def test_example_driver_fail_closed(env: dict[str, str]) -> None:
    code, s, err = run_driver({**env, "LANE_REQUIRED": "1"})
    assert code == 3 and "pre-provider" in err
    assert "ticketId" not in s and s["provider"]["submitCalls"] == 0  # nothing was submitted
