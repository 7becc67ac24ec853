"""The client package split by role — client/driver, client/cli, client/drill — keeps every
entry point (the old module paths are gone: one import path per name), and no module grows past
~500 lines."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import client
import client.driver

CLIENT = Path(client.__file__).parent
MAX_LINES = 500

#: What `from client.driver import ...` offered before the split (its __all__ then).
DRIVER_NAMES = [
    "POLL_STATUSES", "REFUSALS_TO_LOSE", "AlreadySubmitted", "DriverError", "LeaseLost",
    "NotGranted", "NotSubmitted", "ProviderHumanCheck", "ReconcileRequired", "SyncTurn", "Turn",
    "TurnNotHeld", "WaitUpdate", "WindowBusy", "claim_view", "human_check_cooldown_seconds",
]  # fmt: skip


@pytest.mark.parametrize("package", ["driver", "cli", "drill"])
def test_no_module_of_the_split_packages_is_over_500_lines(package: str) -> None:
    sizes = {
        p.relative_to(CLIENT).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
        for p in (CLIENT / package).rglob("*.py")
    }
    assert sizes and not {k: v for k, v in sizes.items() if v > MAX_LINES}, sizes


def test_client_driver_exports_every_name_it_exported_before() -> None:
    assert set(DRIVER_NAMES) <= set(client.driver.__all__)
    for name in client.driver.__all__:
        assert getattr(client.driver, name) is not None, name


@pytest.mark.parametrize("old", ["client.journal", "client.receipts"])
def test_old_import_paths_are_gone(old: str) -> None:
    # One import path per name: the journal and receipts live in client.driver only.
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_the_example_driver_entry_point_runs_the_drivers_example() -> None:
    short, example = (
        importlib.import_module("client.example_driver"),
        importlib.import_module("client.driver.example"),
    )
    assert short.main is example.main


def test_cli_and_drill_public_names() -> None:
    from client.cli import build_parser, main
    from client.drill import (
        DEFAULT_DRILL_LANE,
        DEFAULT_PARTNER_TIMEOUT,
        DrillRefusedError,
        drill_lanes,
        run_drill,
        run_self_test,
        self_test_lane,
    )

    assert callable(main) and build_parser().prog == "lane"
    assert DEFAULT_DRILL_LANE == "drill:acceptance" and DEFAULT_PARTNER_TIMEOUT == 120.0
    assert issubclass(DrillRefusedError, client.LaneClientError)
    assert all(map(callable, (drill_lanes, run_drill, run_self_test, self_test_lane)))


def test_python_dash_m_client_cli_is_the_lane_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "client.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == f"lane {client.__version__}", done
