"""The CI drill: `scripts/drill.sh` (what `make drill` runs) — a FRESH coordinator on loopback,
roles A and B as two separate processes with different machine ids and claims — passes every
step of docs/protocol.md#acceptance-drill (step 7: the in-flight hold keeps B queued after A's
lease expired, A's provider-terminal receipt promotes it), and afterwards the lane files hold no
live ticket on the drill lane or its barrier lane (checked by a second coordinator opened on the
same data dir). With in-flight holds off for the drill route, step 7 fails on both roles with a
message that says so, and everything is still released."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.drill.kit import (
    BARRIER,
    BIN,
    LANE,
    REPO,
    assert_steps_passed,
    clean_env,
    drill_coordinator,
    live,
    step7_numbers,
)
from tests.harness import EXAMPLE_CONFIG


def test_make_drill_passes_with_two_processes_and_leaves_nothing_live(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    env.update(BIN=str(BIN), DRILL_DATA_DIR=str(tmp_path / "data"), DRILL_TIMEOUT="120")
    env["TMPDIR"] = str(tmp_path)
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "drill.sh")],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert_steps_passed(out, 7)
    for role in ("A", "B"):
        assert f"[{role}] drill passed: role {role} on {LANE}" in out
        assert re.search(rf"^\[{role}\] PASS  cleanup  \[{role}\] released (\d+) of \1 drill "
                         r"tickets and (\d+) of \2 barrier tickets", out, re.M), out  # fmt: skip
    assert "FAIL" not in out
    assert f"drill: after: {LANE} held 0 queued 0" in out
    assert f"drill: after: {BARRIER} held 0 queued 0" in out
    assert "drill: PASSED" in out
    # Timings the roles observed are printed: the wake-up of B's parked await and the alarm.
    assert re.search(r"the parked await answered \d+ ms after the grant", out)
    assert re.search(r"the alarm promoted it \d+ ms after expiry", out)
    stayed, receipt_ms, wake_ms = step7_numbers(out)
    print(f"step 7 (SQLite): B not promoted for {stayed} s after A's lease expired; granted "
          f"in the receipt's commit ({receipt_ms:.0f} ms call), B's await answered "
          f"{wake_ms:.0f} ms after the grant")  # fmt: skip
    # Two machines, two claims.
    assert "partner B is machine drill-computer-b" in out
    assert "partner A is machine drill-computer-a" in out
    # Nothing of the drill stays on the machine: the script removed its temp dir.
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("lane-drill.")]

    # The SQLite files agree (a second coordinator on the same data dir).
    coord = drill_coordinator(tmp_path / "reopen", data_dir=tmp_path / "data")
    try:
        for lane in (LANE, BARRIER):
            st = coord.status(lane)
            assert st["enforced"] is True and live(st) == [], (lane, st)
        drill_log = coord.history(LANE)["entries"]
        assert {e["scene"] for e in drill_log} == {
            "shared-queue-drill-a", "shared-queue-drill-b", "shared-queue-race",
            "shared-queue-drill-short", "shared-queue-drill-waiter",
            "shared-queue-drill-inflight", "shared-queue-drill-inflight-waiter",
        }  # fmt: skip
        by_scene = {e["scene"]: e for e in drill_log}
        assert by_scene["shared-queue-drill-short"]["outcome"] == "expired"
        assert by_scene["shared-queue-drill-short"]["machineId"] == "drill-computer-a"
        assert by_scene["shared-queue-drill-waiter"]["machineId"] == "drill-computer-b"
        job = by_scene["shared-queue-drill-inflight"]  # step 7: its hold ended by the receipt
        assert (job["outcome"], job["machineId"], job["inFlightEnded"]) == (
            "expired", "drill-computer-a", "receipt",
        )  # fmt: skip
        assert job["inFlightUntil"] is not None
        assert by_scene["shared-queue-drill-inflight-waiter"]["machineId"] == "drill-computer-b"
        expired = {"shared-queue-drill-short", "shared-queue-drill-inflight"}
        others = [e for s, e in by_scene.items() if s not in expired]
        assert all(e["outcome"] == "not-submitted" for e in others), others
        assert {e["machineId"] for e in drill_log} == {"drill-computer-a", "drill-computer-b"}
        barrier_log = coord.history(BARRIER)["entries"]
        assert barrier_log and all(e["outcome"] == "not-submitted" for e in barrier_log)
        st = coord.op("status", {"lane": LANE, "includeReceipts": True})
        assert st["inFlight"] == []
        # step 5's receipt stored once (replay and conflict were not); step 7's two
        phases = sorted(r["phase"] for r in st["recentReceipts"])
        assert phases == ["lease-acquired", "provider-submitted", "provider-terminal"]
    finally:
        coord.stop()
    assert os.path.isdir(tmp_path / "data")


def test_drill_step_7_fails_clearly_when_holds_are_off(tmp_path: Path) -> None:
    """The drill route with in_flight_hold_seconds = 0: steps 1-6 pass, step 7 fails on both
    roles saying holds are off (not a silent pass), and every ticket is still released."""
    config = tmp_path / "holds-off.toml"
    text = EXAMPLE_CONFIG.read_text(encoding="utf-8")
    assert "in_flight_hold_seconds = 1800" in text
    config.write_text(text.replace("in_flight_hold_seconds = 1800", "in_flight_hold_seconds = 0"))
    env = clean_env(tmp_path)
    env.update(BIN=str(BIN), CONFIG=str(config), DRILL_TIMEOUT="120", TMPDIR=str(tmp_path))
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "drill.sh")],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    for role in ("A", "B"):
        for step in ("1", "2", "3", "3b", "4", "5", "6"):
            assert re.search(rf"^\[{role}\] PASS  step {step}/7  \[{role}\] ", out, re.M), (
                role, step, out,
            )  # fmt: skip
        failed = re.search(rf"^\[{role}\] FAIL  step 7/7  \[{role}\] .*", out, re.M)
        assert failed, out
        assert f"in-flight holds are off for {LANE} on this coordinator" in failed.group(0)
        assert "in_flight_hold_seconds > 0" in failed.group(0)
        assert re.search(rf"^\[{role}\] PASS  cleanup  \[{role}\] released (\d+) of \1 drill "
                         r"tickets and (\d+) of \2 barrier tickets", out, re.M), out  # fmt: skip
    # B's waiter was promoted at A's expiry: that is what B reports
    promoted = r"\[B\] FAIL  step 7/7 .* became held \+\d+\.\d s after A's lease expired"
    assert re.search(promoted, out), out
    assert f"drill: after: {LANE} held 0 queued 0" in out
    assert f"drill: after: {BARRIER} held 0 queued 0" in out
    assert "drill: FAILED (role A exit 1, role B exit 1, lanes clean: 1)" in out
