"""The peer table (bench/peers, `make bench-peers`) cannot rot: its quick mode, with the one
peer CI can always run (the plain-PostgreSQL recipe, on the bench's own throwaway cluster from
tests/harness/postgres.py), drives real cycles through the adapter and prints the table, the
notes and a row per target; and the targets are judged as ratios of the same run. No figure is
judged against a number here: the machine is shared."""

from __future__ import annotations

import re

import pytest

from bench.peers.base import System
from bench.peers.ours import OursPostgres, OursSqlite
from bench.peers.pg_shared import SharedPostgres
from bench.peers.plain_pg import PlainPostgres
from bench.peers.profile import group_of, parse_raw
from bench.peers.run import PROFILED, Result
from bench.peers.shapes import Round
from bench.peers.table import TARGETS, judge, profiles, table
from bench.settings import parse
from tests.harness.subproc import run_bench

TARGET_ROW = re.compile(r"^(PASS|MISS|SKIPPED|ERROR)\s+(P\d)\s", re.M)


def test_the_plain_postgres_recipe_runs_in_quick_mode() -> None:
    done = run_bench(
        "--peers",
        "--quick",
        "--peer-systems",
        "plain-pg",
        env={"BENCH_PEER_SECONDS": "0.5", "BENCH_PEER_HANDOFFS": "5"},
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    row = next(ln for ln in out.splitlines() if ln.startswith("| PostgreSQL alone"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    many, contended, handoff, cpu = cells[1:]
    assert int(many.replace(",", "")) > 0, row  # cycles happened on 100 lanes × 1 client
    assert int(contended.replace(",", "")) > 0, row  # and granted ones on 1 lane × 16
    assert re.fullmatch(r"[\d.]+ / [\d.]+", handoff), row
    assert re.fullmatch(r"[\d.]+ ms", cpu), row
    assert "hand-offs: n = 5" in out
    assert "**PostgreSQL alone" in out  # its fairness note
    # every target has its row; those that need ours are SKIPPED (not run here)
    verdicts = dict((key, v) for v, key in TARGET_ROW.findall(out))
    assert sorted(verdicts) == [t.key for t in TARGETS], out
    assert set(verdicts.values()) == {"SKIPPED"}, verdicts


def _result(system: System, many: float, contended: float, cpu: float, gaps: list[float]) -> Result:
    parts = {"server": cpu, "postgres": 0.5} if "postgres" in system.pids() else {"server": cpu}
    return Result(
        system,
        many=[Round(many, 100, parts)],
        contended=[Round(contended, 16, parts)],
        gaps=gaps,
    )


def _results(**skip: str) -> list[Result]:
    pg = SharedPostgres(fsync=True)
    rows = [
        _result(OursSqlite(), 1_500, 450, 0.4, [1.0] * 90 + [2.9] * 10),
        _result(OursPostgres(pg, 1), 500, 300, 2.3, [2.0] * 100),
        _result(OursPostgres(pg, 2), 700, 320, 2.4, [3.0] * 90 + [9.0] * 10),
        _result(PlainPostgres(pg), 1_000, 400, 0.7, [1.5] * 100),
    ]
    for r in rows:
        if r.system.key in skip:
            r.skipped = skip[r.system.key]
    return rows


def test_targets_are_ratios_of_the_same_run() -> None:
    verdicts = {r.key: (r.verdict, r.result) for r in judge(_results())}
    assert verdicts["P1"][0] == "MISS"  # 500 / 1,000 = 0.5 < 0.6
    assert "500/s vs 1,000/s = 0.50×; 2 replicas 700/s = 0.70×" in verdicts["P1"][1]
    assert verdicts["P2"][0] == "PASS"  # 300 / 400 = 0.75
    assert verdicts["P3"][0] == "MISS"  # 2.3 ms > 0.8
    assert verdicts["P4"][0] == "MISS"  # the two-replica p99 is 9 ms
    assert verdicts["P5"][0] == "PASS"  # 1,500 / 1,000
    assert verdicts["P6"][0] == "PASS"  # 450 / 400
    assert verdicts["P7"][0] == "PASS"  # 0.4 ms
    assert verdicts["P8"][0] == "PASS"  # p99 2.9 ms


def test_a_target_whose_peer_is_missing_is_skipped_and_one_that_failed_is_an_error() -> None:
    rows = _results(**{"plain-pg": "no PostgreSQL: initdb not found"})
    verdicts = {r.key: (r.verdict, r.result) for r in judge(rows)}
    assert verdicts["P1"] == ("SKIPPED", "SKIPPED: plain-pg: no PostgreSQL: initdb not found")
    assert verdicts["P3"][0] == "MISS"  # needs no peer
    failed = _results()
    failed[0].error, failed[0].gaps = "hand-off: BenchError: the waiter was not granted", []
    by = {r.key: r for r in judge(failed)}
    assert by["P8"].verdict == "ERROR"
    assert "the waiter was not granted" in by["P8"].result
    assert by["P5"].verdict == "PASS"  # its throughput was measured before the failure
    text = table(rows, 8, 3)
    assert "| PostgreSQL alone (a holders-count row per lane, LISTEN/NOTIFY) | SKIPPED:" in text
    assert "| ours, PostgreSQL (one replica) | 500 | 300 | 2.00 / 2.00 | 2.30 ms + " in text


def test_peer_systems_are_checked() -> None:
    assert parse(["--peers"], env={}).only == frozenset({"peers"})
    with pytest.raises(SystemExit):
        parse(["--peers", "--peer-systems", "zookeeper"], env={})


M = "<module> (coordinator/cli.py:400)"
RAW = "\n".join(
    [
        f"{M};run (asyncio/runners.py:190);_run_once (asyncio/base_events.py:1922) 10",
        f"{M};_handle_request (aiohttp/web_protocol.py:452) 30",
        f"{M};acquire (coordinator/http/app.py:130);_execute (coordinator/actor/pipelined.py:1) 25",
        f"{M};acquire (coordinator/engine/lane.py:200);__init__ (<string>:3) 5",
        f"{M};write_changes (coordinator/store/sqlite_writes.py:288) 20",
        f"{M};set (prometheus_client/values.py:32) 10",
        "garbage line",
    ]
)


def test_a_profile_counts_each_sample_against_its_innermost_frames_module() -> None:
    p = parse_raw(RAW)
    assert p.samples == 100
    assert p.shares == {
        "aiohttp": 0.30,
        "actor": 0.25,
        "store": 0.20,
        "asyncio": 0.10,
        "metrics and logs": 0.10,
        "dataclass constructors": 0.05,
    }
    assert p.summary().startswith("100 samples: aiohttp 30%, actor 25%, store 20%")
    assert group_of("f (/usr/lib/python3/site-packages/sortedcontainers/sortedlist.py:9)") == (
        "engine"
    )
    assert group_of("f (/opt/somewhere/else.py:1)") == "other"
    assert parse_raw("").samples == 0


def test_a_miss_is_printed_with_the_profile_of_the_system_it_judges() -> None:
    results = _results()
    profile = parse_raw(RAW)
    for r in results:
        if r.system.key == "pg1":
            r.profile = profile
        if r.system.key == "sqlite":
            r.profile = "py-spy is not installed (make setup installs it)"
    assert {t.explained_by for t in TARGETS} <= set(PROFILED)
    by = {r.key: r for r in judge(results)}
    assert by["P3"].verdict == "MISS"
    assert by["P3"].why.startswith("profile of ours, PostgreSQL (one replica), 100 × 1: 100 ")
    assert by["P4"].why == by["P3"].why  # two replicas: one replica's profile
    assert by["P2"].verdict == "PASS" and by["P2"].why == ""
    slow = [_result(OursSqlite(), 1_500, 450, 0.9, [1.0] * 100), *results[1:]]
    slow[0].profile = results[0].profile
    p7 = {r.key: r for r in judge(slow)}["P7"]
    assert p7.verdict == "MISS" and p7.why.startswith("no profile (py-spy is not installed")
    text = profiles(results)
    assert "- **ours, PostgreSQL (one replica)** (100 samples): aiohttp 30.0%, actor 25.0%" in text
    assert "- **ours, SQLite (synchronous=FULL)**: SKIPPED: py-spy is not installed" in text


def test_ours_on_sqlite_is_profiled_in_the_same_run() -> None:
    done = run_bench(
        "--peers",
        "--quick",
        "--peer-systems",
        "sqlite",
        env={
            "BENCH_PEER_SECONDS": "0.5",
            "BENCH_PEER_HANDOFFS": "5",
            "BENCH_PEER_PROFILE_SECONDS": "1",
        },
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    m = re.search(
        r"^- \*\*ours, SQLite \(synchronous=FULL\)\*\* \(([\d,]+) samples\): (.+)$", out, re.M
    )
    assert m is not None, out
    assert int(m.group(1).replace(",", "")) > 0
    shares = dict(part.rsplit(" ", 1) for part in m.group(2).split(", "))
    assert {"aiohttp", "actor", "store"} <= set(shares), shares
    assert abs(sum(float(v.rstrip("%")) for v in shares.values()) - 100) < 1, shares
