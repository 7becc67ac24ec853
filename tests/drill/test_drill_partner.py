"""A role whose partner never arrives (or vanishes, or the operator presses Ctrl-C) fails with
a clear message, exits non-zero and releases every ticket it made — drill and barrier."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.drill.kit import BARRIER, BIN, LANE, drill, drill_coordinator, live, role_env
from tests.harness import CoordinatorProcess


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[CoordinatorProcess]:
    c = drill_coordinator(tmp_path)
    yield c
    c.stop()


def test_role_a_alone_times_out_and_releases_its_announcement(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    env = role_env(tmp_path, coordinator, "lonely-a")
    run = subprocess.run(
        [str(BIN / "lane"), "drill", "--role", "a", "--timeout", "3", "--json"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert "FAIL  step 0/7" in run.stderr
    assert "partner B did not arrive (start `lane drill --role b`) within 3 s" in run.stderr
    report = json.loads(run.stdout)
    assert report["ok"] is False and report["role"] == "a" and report["runId"]
    assert [s["step"] for s in report["steps"]] == ["0"]
    assert report["tickets"] == []
    assert report["cleanup"]["ok"] is True
    made = report["barrierTickets"]
    assert len(made) == 2  # hello:a and abort:a
    # Nothing of it is live; the render log of the barrier lane has both, released.
    assert live(coordinator.status(BARRIER)) == []
    assert live(coordinator.status(LANE)) == []
    ended = {e["ticketId"]: e for e in coordinator.history(BARRIER)["entries"]}
    assert set(made) <= set(ended)
    assert {ended[t]["scene"] for t in made} == {"hello:a", "abort:a"}
    assert all(ended[t]["outcome"] == "not-submitted" for t in made)
    assert all(ended[t]["machineId"] == "lonely-a" for t in made)


def test_role_b_alone_times_out_without_making_anything(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    env = role_env(tmp_path, coordinator, "lonely-b")
    p = drill(env, "--role", "b", "--timeout", "3")
    assert p.wait(120) == 1, p.text
    assert "no drill announcement from role A on drill:acceptance-barrier within 3 s" in p.text
    assert "released 0 of 0 drill tickets and 0 of 0 barrier tickets" in p.text
    assert coordinator.history(BARRIER)["entries"] == []
    assert live(coordinator.status(BARRIER)) == []


def test_partner_vanishing_mid_drill_fails_the_other_role_which_releases_its_tickets(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    a = drill(role_env(tmp_path, coordinator, "stays-a"), "--role", "a", "--timeout", "15")
    b = drill(role_env(tmp_path, coordinator, "dies-b"), "--role", "b", "--timeout", "60")
    try:
        b.wait_for_line(lambda ln: ln.startswith("PASS  step 2/7"), 120)
        b.kill()  # SIGKILL: B can release nothing
        assert a.wait(180) == 1, a.text
    finally:
        a.kill()
        b.kill()
    assert "PASS  step 1/7" in a.text and "PASS  step 2/7" in a.text
    assert re.search(r"FAIL  step 3/7 .*partner B did not .* within 15 s", a.text), a.text
    m = re.search(r"PASS  cleanup  \[A\] released (\d+) of (\d+) drill tickets", a.text)
    assert m and m.group(1) == m.group(2) and int(m.group(1)) >= 1, a.text
    # Everything still live belongs to the killed B; all of A's tickets ended.
    for lane in (LANE, BARRIER):
        owners = {t["machineId"] for t in live(coordinator.status(lane))}
        assert owners <= {"dies-b"}, (lane, owners)
    a_rows = [e for e in coordinator.history(LANE)["entries"] if e["machineId"] == "stays-a"]
    assert {e["scene"] for e in a_rows} >= {"shared-queue-drill-a"}
    assert all(e["outcome"] == "not-submitted" for e in a_rows)
    assert "dies-b" in {t["machineId"] for t in live(coordinator.status(LANE))}


def test_ctrl_c_releases_every_ticket_and_exits_130(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    a = drill(role_env(tmp_path, coordinator, "interrupted-a"), "--role", "a")
    try:
        a.wait_for_line(lambda ln: "announced on drill:acceptance-barrier" in ln, 120)
        assert len(live(coordinator.status(BARRIER))) == 1
        a.signal(signal.SIGINT)
        assert a.wait(120) == 130, a.text
    finally:
        a.kill()
    assert "drill interrupted — releasing every ticket of role A" in a.text
    cleaned = r"PASS  cleanup  \[A\] released 0 of 0 drill tickets and (\d+) of \1 barrier"
    assert re.search(cleaned, a.text), a.text
    assert live(coordinator.status(BARRIER)) == []
    scenes = {e["scene"] for e in coordinator.history(BARRIER)["entries"]}
    assert "hello:a" in scenes
