"""The CI drill: `scripts/drill.sh` (what `make drill` runs) — a FRESH coordinator on loopback,
roles A and B as two separate processes with different machine ids and claims — passes every
step of docs/protocol.md#acceptance-drill, and afterwards the lane files hold no live ticket on the
drill lane or its barrier lane (checked by a second coordinator opened on the same data dir)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.drill.kit import BARRIER, BIN, LANE, REPO, clean_env, drill_coordinator, live

STEPS = ["1", "2", "3", "3b", "4", "5", "6"]


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
    for role in ("A", "B"):
        for step in STEPS:
            assert re.search(rf"^\[{role}\] PASS  step {step}/6  \[{role}\] ", out, re.M), (
                role, step, out,
            )  # fmt: skip
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
        }  # fmt: skip
        by_scene = {e["scene"]: e for e in drill_log}
        assert by_scene["shared-queue-drill-short"]["outcome"] == "expired"
        assert by_scene["shared-queue-drill-short"]["machineId"] == "drill-computer-a"
        assert by_scene["shared-queue-drill-waiter"]["machineId"] == "drill-computer-b"
        others = [e for s, e in by_scene.items() if s != "shared-queue-drill-short"]
        assert all(e["outcome"] == "not-submitted" for e in others), others
        assert {e["machineId"] for e in drill_log} == {"drill-computer-a", "drill-computer-b"}
        barrier_log = coord.history(BARRIER)["entries"]
        assert barrier_log and all(e["outcome"] == "not-submitted" for e in barrier_log)
        receipts = coord.op("status", {"lane": LANE, "includeReceipts": True})
        assert len(receipts["recentReceipts"]) == 1  # stored once; replay and conflict were not
    finally:
        coord.stop()
    assert os.path.isdir(tmp_path / "data")
