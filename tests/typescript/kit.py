"""The TypeScript client's package (clients/typescript) from pytest: Node.js and its pinned
npm dependencies (scripts/ensure-node.sh), npm and node commands run in it, and the
coordinator its tests run against."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.harness import REPO, CoordinatorProcess, client_config

PACKAGE = REPO / "clients" / "typescript"
SCHEMA = PACKAGE / "src" / "schema.ts"
ENSURE_NODE = REPO / "scripts" / "ensure-node.sh"
NPM_TIMEOUT = 600.0
# The TypeScript drill's lanes are on route `drill` (capacity 1); in-flight holds on, explicitly
# (the drill's in-flight test needs a hold longer than the test).
IN_FLIGHT_HOLD_SECONDS = 600.0


def ensure_node() -> None:
    """Node.js, npm and the package's node_modules (npm ci), as `make test-core` does first."""
    done = subprocess.run(
        ["sh", str(ENSURE_NODE)], capture_output=True, text=True, timeout=NPM_TIMEOUT, check=False
    )
    assert done.returncode == 0, f"scripts/ensure-node.sh failed:\n{done.stdout}\n{done.stderr}"


def node_env(**extra: str) -> dict[str, str]:
    """The environment for npm and node: no LANE_* from the developer's shell, no colours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANE_")}
    env.update(NO_COLOR="1", FORCE_COLOR="0", npm_config_update_notifier="false")
    env.update(extra)
    return env


def run(
    args: list[str], cwd: Path = PACKAGE, timeout: float = NPM_TIMEOUT, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=cwd,
        env=node_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ts_coordinator(tmp: Path) -> CoordinatorProcess:
    """`lane-coordinator serve` on loopback with the client suites' config (route `drill`
    capacity 1) and in-flight holds of IN_FLIGHT_HOLD_SECONDS on that route."""
    cfg = client_config(route_holds={"drill": IN_FLIGHT_HOLD_SECONDS})
    return CoordinatorProcess(tmp / "data", config=cfg)
