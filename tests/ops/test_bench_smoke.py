"""`make bench` cannot rot: the bench (bench/, `python -m bench`) in its quickest mode, on two
cheap shapes, prints a row per shape with its target and PASS/MISS, then the markdown table;
and when PostgreSQL cannot be started, its rows print "SKIPPED: reason" instead of failing;
the ETA-error row (10) on a short workload agrees with the lane. The figures themselves are
not judged here: the machine is shared."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NoReturn

import pytest

import bench.eta
import bench.pg
from bench.context import Context
from bench.report import Report
from bench.settings import parse
from tests.harness.postgres import PostgresUnavailable
from tests.harness.subproc import run_bench

ROW = re.compile(r"^(PASS|MISS)\s+(\S+)\s+(.+?): (.+)$", re.M)


def test_quick_bench_prints_a_row_per_shape_and_the_table() -> None:
    done = run_bench(
        "--quick", "--only", "3,4", env={"BENCH_SECONDS": "0.5", "BENCH_HANDOFF_SAMPLES": "10"}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {m.group(2): m.group(4) for m in ROW.finditer(done.stdout)}
    assert set(rows) == {"3", "4"}, done.stdout
    assert re.search(r"/s vs bare [\d,]+/s = \d+\.\d\d×", rows["3"]), rows["3"]
    assert re.search(r"p50 [\d.]+ ms, p99 [\d.]+ ms \(n=10\)", rows["4"]), rows["4"]
    assert done.stdout.count("target ") >= 2
    table = [ln for ln in done.stdout.splitlines() if ln.startswith("| ")]
    assert table[0] == "| # | shape | result | target | |"
    assert [ln.split(" | ")[0] for ln in table[1:]] == ["| 3", "| 4"]


def test_an_unknown_shape_is_refused() -> None:
    with pytest.raises(SystemExit):
        parse(["--only", "11"], env={})


async def test_postgres_rows_are_skipped_when_it_cannot_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def no_postgres(fsync: bool) -> NoReturn:
        raise PostgresUnavailable("no PostgreSQL server binaries (initdb, pg_ctl, postgres)")

    monkeypatch.setattr(bench.pg, "start_cluster", no_postgres)
    ctx = Context(parse(["--quick", "--only", "9"], env={}), tmp_path, Report())
    try:
        await bench.pg.shape9(ctx)
    finally:
        ctx.close()
    assert [(r.key, r.verdict) for r in ctx.report.rows] == [
        ("9a", "SKIPPED"),
        ("9b", "SKIPPED"),
        ("9c", "SKIPPED"),
    ]
    assert all(r.result.startswith("SKIPPED: no PostgreSQL server") for r in ctx.report.rows)
    assert not ctx.report.failed()


async def test_the_eta_error_row_is_the_lanes_own_figure(tmp_path: Path) -> None:
    settings = parse(["--quick", "--only", "10"], env={"BENCH_ETA_JOBS": "60"})
    ctx = Context(settings, tmp_path, Report())
    try:
        await bench.eta.shape10(ctx)
    finally:
        ctx.close()
    [row] = ctx.report.rows
    assert (row.key, row.verdict) == ("10", "PASS"), row
    assert re.match(r"last 60: median [\d,]+ s, p90 [\d,]+ s; all grants median", row.result)


def test_the_in_process_server_of_the_eta_row_writes_no_log_lines() -> None:
    """Row 10 runs the coordinator in the bench's own process: its lines at info and debug
    (one per ticket change and request) must not flood the bench's report (a full run
    printed 2,405 of them between rows 9 and 10)."""
    done = run_bench("--quick", "--only", "10", env={"BENCH_ETA_JOBS": "40"})
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "lane.ticket" not in out and "http.request" not in out, out[:2000]
    assert [m.group(2) for m in ROW.finditer(done.stdout)] == ["10"], done.stdout
