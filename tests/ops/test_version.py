"""One version: `__version__` in coordinator/__init__.py is the only hand-written copy.
pyproject.toml reads it (hatchling dynamic version); the installed package metadata, the
client package and both CLIs' `--version` all say the same. (tests/ops/test_dist.py checks
the same against a wheel installed into a fresh venv.)"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import client
import coordinator

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_pyproject_reads_the_version_from_coordinator_init() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"], "a second hand-written version"
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["hatch"]["version"]["path"] == "coordinator/__init__.py"


def test_no_other_hand_written_version() -> None:
    assignments = [
        str(path.relative_to(ROOT))
        for package in ("coordinator", "client")
        for path in sorted((ROOT / package).rglob("*.py"))
        if re.search(r"^__version__\s*[:=]", path.read_text(encoding="utf-8"), re.MULTILINE)
    ]
    assert assignments == ["coordinator/__init__.py"]


def test_version_is_pep440_release() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", coordinator.__version__)


def test_metadata_and_packages_agree() -> None:
    # The editable install's metadata: `make setup` reinstalls when coordinator/__init__.py
    # changes, so a version bump never leaves it stale.
    assert importlib.metadata.version("lane-coordinator") == coordinator.__version__
    assert client.__version__ == coordinator.__version__


def test_both_clis_print_the_version() -> None:
    for prog in ("lane", "lane-coordinator"):
        done = subprocess.run(
            [str(BIN / prog), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"{prog} {coordinator.__version__}\n"
