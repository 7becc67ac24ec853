"""One row per shape: the figure, the target beside it and PASS/MISS, printed as soon as it is
measured; at the end the same rows as a markdown table for a closing note."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["PASS", "MISS", "SKIPPED", "ERROR"]


@dataclass(frozen=True, slots=True)
class Row:
    key: str  # "1a", "9c"
    shape: str  # what was measured, e.g. "100 lanes × 1 client: cycles/s"
    result: str  # the figure(s), e.g. "512 vs bare 3,100 = 0.17×"
    target: str  # e.g. "≥ 0.4× bare"
    verdict: Verdict
    why: str = ""  # printed under a MISS: what stands behind it (the peer table's profiles)


def verdict(ok: bool) -> Verdict:
    return "PASS" if ok else "MISS"


def ratio(x: float) -> str:
    return f"{x:.2f}×"


def num(x: float, digits: int = 0) -> str:
    """1234.5 -> '1,234' (digits=0) or '1,234.5' (digits=1)."""
    return f"{x:,.{digits}f}"


@dataclass(slots=True)
class Report:
    rows: list[Row] = field(default_factory=list)

    def add(self, row: Row) -> None:
        self.rows.append(row)
        print(f"{row.verdict:<7} {row.key:<3} {row.shape}: {row.result}", flush=True)
        print(f"{'':<12}target {row.target}", flush=True)
        if row.why:
            print(f"{'':<12}why: {row.why}", flush=True)

    def row(self, key: str, shape: str, result: str, target: str, ok: bool) -> None:
        self.add(Row(key, shape, result, target, verdict(ok)))

    def skipped(self, key: str, shape: str, target: str, reason: str) -> None:
        self.add(Row(key, shape, f"SKIPPED: {reason}", target, "SKIPPED"))

    def error(self, key: str, shape: str, target: str, exc: BaseException) -> None:
        what = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]
        self.add(Row(key, shape, f"ERROR: {what}", target, "ERROR"))

    def failed(self) -> bool:
        """A shape the harness could not measure (not a missed target)."""
        return any(r.verdict == "ERROR" for r in self.rows)

    def markdown(self) -> str:
        def cell(s: str) -> str:
            return s.replace("|", "\\|")

        lines = ["| # | shape | result | target | |", "|---|---|---|---|---|"]
        for r in self.rows:
            cells = (r.key, r.shape, r.result, r.target, r.verdict)
            lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
        return "\n".join(lines)


def note(text: str) -> None:
    """A progress line (to stderr: stdout carries only the rows and the table)."""
    print(f"  .. {text}", file=sys.stderr, flush=True)
