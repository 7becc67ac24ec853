"""Helpers for the drill tests: the drill's lanes, a coordinator subprocess with the example
config (tests/harness `CoordinatorProcess`), `lane drill` role processes with their output
followed line by line, and role environments."""

from __future__ import annotations

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
