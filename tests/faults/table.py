"""One row per fault: what the campaign prints at its end (a markdown table).

A test fills its `Row` (the `row` fixture of tests/faults/conftest.py) with the checker's
`Report` and a short note; the fixture adds the test's result. The rows of a run are kept in
`ROWS`; with FAULTS_RESULTS=<file> each row is also appended to that file as one JSON line,
which is how `python -m tests.faults` (`make faults`) collects them across a pytest process.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.harness.history import Report

RESULTS_ENV = "FAULTS_RESULTS"


@dataclass
class Row:
    fault: str
    acknowledged: int | None = None
    lost: int | None = None
    violations: int | None = None
    notes: list[str] = field(default_factory=list)
    result: str = "not run"

    def report(self, report: Report) -> None:
        """Take the counts of one checker run (several runs in one test add up)."""
        self.acknowledged = (self.acknowledged or 0) + report.acknowledged
        self.lost = (self.lost or 0) + report.lost
        self.violations = (self.violations or 0) + len(report.violations)

    def note(self, text: str) -> None:
        self.notes.append(text)


ROWS: list[Row] = []


def keep(row: Row) -> None:
    ROWS.append(row)
    path = os.environ.get(RESULTS_ENV)
    if path:
        with Path(path).open("a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(row)) + "\n")


def load(path: Path) -> list[Row]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rows.append(Row(**json.loads(line)))
    return rows


def _cell(v: int | None) -> str:
    return "–" if v is None else str(v)


def render(rows: list[Row]) -> str:
    """The markdown table, by fault: fault, acknowledged, lost, violations, result, note."""
    lines = [
        "| fault | acknowledged | lost | violations | result | note |",
        "|---|---:|---:|---:|---|---|",
    ]
    for r in sorted(rows, key=lambda r: r.fault):
        note = "; ".join(r.notes).replace("|", "/").replace("\n", " ")
        cells = [r.fault, _cell(r.acknowledged), _cell(r.lost), _cell(r.violations)]
        lines.append("| " + " | ".join([*cells, r.result, note]) + " |")
    return "\n".join(lines)
