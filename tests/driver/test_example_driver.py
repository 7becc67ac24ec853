"""`python -m client.example_driver` end to end, as a subprocess against the real
coordinator: the whole flow, a crash and its resume, a human check."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import msgspec

from client.api import LaneClient
from tests.harness import ThreadedCoordinator

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


async def test_example_driver_crash_and_resume(
    coord: ThreadedCoordinator, env: dict[str, str]
) -> None:
    code, s, err = run_driver(coord.env(env), "--demo-crash")
    assert code == 0, err[-3000:]
    assert "simulated crash after submit" in err
    assert s["resumed"] and s["adopted"] and s["outcome"] == "completed"
    assert s["provider"]["submitCalls"] == 1  # the crashed run's submit only; never again
    async with LaneClient(coord.url, coord.token, "studio-a") as a:
        hist = await a.history(LANE)
        assert [(e.ticket_id, e.outcome, e.provider_job_id) for e in hist.entries] == [
            (s["ticketId"], "completed", s["providerJobId"])
        ]
        assert hist.entries[0].claim_id != s["claim"]  # held under the crashed run's claim


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
