"""`python -m tests.faults [pytest args]` (`make faults`): the fault campaign, then its table.

Runs pytest over tests/faults in a child process (FAULTS_FULL=1 unless the environment says
otherwise: the full run, a few minutes), collects one row per fault (FAULTS_RESULTS, see
table.py) and prints them last, as a markdown table. Exits with pytest's status.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.faults.kit import FULL
from tests.faults.table import RESULTS_ENV, load, render

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def main(argv: list[str]) -> int:
    env = dict(os.environ)
    env.setdefault("FAULTS_FULL", "1")
    full = env["FAULTS_FULL"] not in ("", "0") or FULL
    with tempfile.TemporaryDirectory(prefix="faults-") as tmp:
        results = Path(tmp) / "rows.jsonl"
        env[RESULTS_ENV] = str(results)
        began = time.monotonic()
        cmd = [sys.executable, "-m", "pytest", "-q", "-rfExX", str(HERE), *argv]
        code = subprocess.call(cmd, cwd=REPO, env=env)
        took = time.monotonic() - began
        rows = load(results)
    print()
    kind = "full" if full else "short"
    print(f"## Fault campaign ({kind} run, {took:.0f} s, pytest exit {code})")
    print()
    print(render(rows) if rows else "(no fault ran)")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
