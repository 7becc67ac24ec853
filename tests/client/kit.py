"""Helpers for the client tests: the `lane` console script as a subprocess, and the shared
environment that points it at a coordinator. Coordinators come from tests/harness (fixtures
in tests/client/conftest.py)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any

from tests.harness import LANE_BIN as LANE_BIN  # re-exported for the tests
from tests.harness import REPO as REPO
from tests.harness import UNENFORCED_LANE as UNENFORCED_LANE
from tests.harness import ThreadedCoordinator
from tests.harness.credentials import Cred

#: A driver credential bound to studio-b, accepted by the `coordinator` fixture beside its
#: plain token (an admin, docs/protocol.md#credentials).
STUDIO_B = Cred("studio-b", "driver", "studio-b")


def shared_env(
    base: dict[str, str], server: ThreadedCoordinator, machine: str = "studio-a"
) -> dict[str, str]:
    """`base` plus LANE_COORDINATOR_URL, LANE_TOKEN and LANE_MACHINE_ID for `server`."""
    return server.env(base, machine)


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def lane(*args: str, env: dict[str, str], stdin: str | None = None, timeout: float = 120) -> Run:
    """Run the installed `lane` console script."""
    p = subprocess.run(
        [str(LANE_BIN), *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO),
    )
    return Run(p.returncode, p.stdout, p.stderr)
