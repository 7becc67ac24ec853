"""No Python module of the coordinator or the client grows past 500 lines: a module that does
is split along a real seam, never trimmed by squeezing code."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 500


def test_no_module_in_coordinator_or_client_is_over_500_lines() -> None:
    sizes = {
        p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
        for package in ("coordinator", "client")
        for p in (ROOT / package).rglob("*.py")
    }
    assert len(sizes) > 20, sizes  # the walk found the packages
    too_big = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not too_big, too_big
