"""Helpers for the drill tests: the drill's lanes, a coordinator subprocess with the example
config (tests/harness `CoordinatorProcess`), `lane drill` role processes with their output
followed line by line, and role environments."""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Any

from tests.harness import BIN as BIN  # re-exported for the tests
from tests.harness import EXAMPLE_CONFIG, CoordinatorProcess, LineProcess
from tests.harness import REPO as REPO
from tests.harness import clean_env as _clean_env

LANE = "drill:acceptance"
BARRIER = "drill:acceptance-barrier"


def drill_coordinator(tmp: Path, data_dir: Path | None = None) -> CoordinatorProcess:
    """`lane-coordinator serve` on 127.0.0.1:<port 0> with deploy/example-config.toml, a fresh
    token in `tmp/coordinator-token`, data in `data_dir` (default `tmp/data`)."""
    tmp.mkdir(parents=True, exist_ok=True)
    return CoordinatorProcess(data_dir or tmp / "data", tmp / "coordinator-token", EXAMPLE_CONFIG)


def clean_env(tmp: Path) -> dict[str, str]:
    """No LANE_* from the developer's shell, private config dir, no keyring (no state dir:
    the drill never uses the local queue)."""
    return _clean_env(tmp, state_dir=False)


def role_env(tmp: Path, coord: CoordinatorProcess, machine: str, **extra: str) -> dict[str, str]:
    env = clean_env(tmp)
    env.update(
        LANE_COORDINATOR_URL=coord.url,
        LANE_TOKEN=coord.token,
        LANE_MACHINE_ID=machine,
        LANE_CLAIM=f"{machine}-{secrets.token_hex(4)}",
        LANE_REQUIRED="1",
        LANE_CONFIG_DIR=str(tmp / f"lane-config-{machine}"),
    )
    env.update(extra)
    return env


def drill(env: dict[str, str], *args: str) -> LineProcess:
    """`lane drill ARGS` as its own process."""
    return LineProcess([str(BIN / "lane"), "drill", *args], env)


def live(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [*status["held"], *status["queued"]]


STEPS = ["1", "2", "3", "3b", "4", "5", "6", "7"]  # every run of `lane drill`; 8: --partition
WATCH = 5.0  # client/drill/common.py IN_FLIGHT_WATCH_SECONDS: B stays queued this long at least


def assert_steps_passed(out: str, total: int, *, prefixed: bool = True) -> None:
    """Both roles printed `PASS  step N/total` for every step (lines prefixed `[A]`/`[B]` by
    the scripts, else as a role prints them)."""
    steps = [*STEPS, "8"] if total == 8 else STEPS
    for role in ("A", "B"):
        for step in steps:
            lead = rf"\[{role}\] " if prefixed else ""
            pattern = rf"^{lead}PASS  step {step}/{total}  \[{role}\] "
            assert re.search(pattern, out, re.M), (role, step, out)


def step7_numbers(out: str) -> tuple[float, float, float]:
    """Step 7's measurements from both roles' PASS lines: (seconds B's waiter stayed queued
    after A's lease expired, ms of A's provider-terminal receipt call — the grant is in its
    commit —, ms from the grant to B's parked await answering); each checked: B not promoted
    for the whole watch, promoted by the receipt within seconds."""
    a = re.search(
        r"PASS  step 7/\d  \[A\] .* not promoted for (\d+\.\d) s after A's lease expired; "
        r"provider-terminal ended the hold \(inFlightEnded receipt\) and promoted it in the "
        r"receipt's own commit, within the (\d+) ms the receipt call took \(fence \d+\); "
        r"B's parked await answered (\d+) ms after the grant",
        out,
    )
    assert a, out
    b = re.search(
        r"PASS  step 7/\d  \[B\] .* — waiter \S+ queued behind A's \S+: not promoted for "
        r"(\d+\.\d) s after A's lease expired .* A's provider-terminal receipt promoted it "
        r"\(fence \d+\): the parked await answered (\d+) ms after the grant",
        out,
    )
    assert b, out
    stayed, receipt_ms, wake_ms = float(a.group(1)), float(a.group(2)), float(a.group(3))
    assert stayed == float(b.group(1)) >= WATCH, (stayed, b.group(1))
    assert wake_ms == float(b.group(2)), (wake_ms, b.group(2))
    assert receipt_ms < 5000 and wake_ms < 5000, (receipt_ms, wake_ms)
    return stayed, receipt_ms, wake_ms
