"""The peer table as printed (markdown), the fairness notes under it, and issue 21's targets
as report rows, each a ratio or a figure of the same run:

- PostgreSQL path (ours, one replica): 100 × 1 and 1 × 16 granted ≥ 0.6× the plain-PostgreSQL
  recipe; coordinator CPU ≤ 0.8 ms per cycle; cross-replica hand-off (two replicas) p99 < 5 ms.
- SQLite path: 100 × 1 and 1 × 16 granted ≥ 1.0× the plain-PostgreSQL recipe; server CPU
  ≤ 0.5 ms per cycle; hand-off p99 < 3 ms.

A MISS is printed with the profile of the system it judges (bench/peers/profile.py: where
that server's CPU went in one more window of the same run), pointing at
docs/performance.md#the-targets for what stands behind each share.

A target whose figures are missing is SKIPPED (a system not run or not installed) or ERROR
(a system that failed)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from bench.common import pct
from bench.context import Context
from bench.peers.profile import Profile
from bench.peers.run import CONTENDED_CLIENTS, MANY_LANES, Result, run_peers
from bench.report import Row, Verdict, num, ratio

PG_FLOOR = 0.6  # × the plain-PostgreSQL recipe
SQLITE_FLOOR = 1.0
PG_CPU_MS = 0.8
SQLITE_CPU_MS = 0.5
PG_HANDOFF_P99_MS = 5.0
SQLITE_HANDOFF_P99_MS = 3.0
DASH = "–"
WHERE = "docs/performance.md#the-targets"

DURABLE = (
    "every system durable: SQLite synchronous=FULL; PostgreSQL fsync and synchronous_commit "
    "on; etcd's default WAL; Redis appendfsync always. One load generator (asyncio, one "
    "connection per client) for all; capacity 1 per lane. Granted cycles: acquire → wait "
    "until held → release, each client waiting its turn. Server CPU: the time on a CPU "
    "(schedstat) of the system's own processes over the timed window, per cycle (for ours "
    "on PostgreSQL the replicas', with the PostgreSQL backends' beside it; for the plain "
    "recipe the backends')."
)


def _fmt(x: float, digits: int = 0) -> str:
    return DASH if math.isnan(x) else num(x, digits)


def _gaps(r: Result) -> str:
    if not r.gaps:
        return DASH
    return f"{pct(r.gaps, 50):.2f} / {pct(r.gaps, 99):.2f}"


def _cpu(r: Result) -> str:
    server = r.cpu_ms()
    if math.isnan(server):
        return DASH
    text = f"{server:.2f} ms"
    if "postgres" in r.system.pids():
        text += f" + PostgreSQL {r.cpu_ms('postgres'):.2f}"
    return text


def table(results: list[Result], seconds: float, rounds: int) -> str:
    lines = [
        f"| system | {MANY_LANES} lanes × 1 client, cycles/s | 1 lane × {CONTENDED_CLIENTS} "
        "clients, granted cycles/s | hand-off p50 / p99 ms | server CPU per cycle "
        f"({MANY_LANES} × 1) |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in results:
        if r.skipped is not None:
            cells = [f"SKIPPED: {r.skipped}", DASH, DASH, DASH]
        else:
            cells = [_fmt(r.rate("many")), _fmt(r.rate("contended")), _gaps(r), _cpu(r)]
            if r.error is not None:
                cells[-1] += f" (ERROR in {r.error.split(':', 1)[0]})"
        lines.append(f"| {r.system.title} | " + " | ".join(cells) + " |")
    how = f"median of {max(1, rounds)} round(s) of {seconds:g} s per system and shape"
    return "\n".join(lines) + f"\n\n({how}; hand-offs: n = {max(len(r.gaps) for r in results)})"


def notes(results: list[Result]) -> str:
    lines = [f"- {DURABLE}"]
    lines += [f"- **{r.system.title}**: {r.system.notes}." for r in results]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Target:
    key: str
    shape: str
    target: str
    judge: Callable[[dict[str, Result]], tuple[str, bool]]  # (result text, met)
    needs: tuple[str, ...]  # system keys whose figures it reads
    explained_by: str  # the profiled system (run.PROFILED) a MISS is printed with


def _ratio_of(
    ours: str, which: str, floor: float
) -> Callable[[dict[str, Result]], tuple[str, bool]]:
    def judge(by: dict[str, Result]) -> tuple[str, bool]:
        mine, plain = by[ours].rate(which), by["plain-pg"].rate(which)
        text = f"{num(mine)}/s vs {num(plain)}/s = {ratio(mine / plain)}"
        two = by.get("pg2")
        if ours == "pg1" and two is not None and not math.isnan(two.rate(which)):
            text += f"; 2 replicas {num(two.rate(which))}/s = {ratio(two.rate(which) / plain)}"
        return text, mine / plain >= floor

    return judge


def _cpu_of(ours: str, limit: float) -> Callable[[dict[str, Result]], tuple[str, bool]]:
    def judge(by: dict[str, Result]) -> tuple[str, bool]:
        mine = by[ours].cpu_ms()
        text = _cpu(by[ours]) + (" ms" if "postgres" in by[ours].system.pids() else "")
        plain = by.get("plain-pg")
        if plain is not None and not math.isnan(plain.cpu_ms()):
            text += f" (the plain recipe: PostgreSQL {plain.cpu_ms():.2f} ms)"
        return text, mine <= limit

    return judge


def _handoff_of(ours: str, limit: float) -> Callable[[dict[str, Result]], tuple[str, bool]]:
    def judge(by: dict[str, Result]) -> tuple[str, bool]:
        gaps = by[ours].gaps
        text = f"p50 {pct(gaps, 50):.2f} ms, p99 {pct(gaps, 99):.2f} ms (n={len(gaps)})"
        return text, pct(gaps, 99) < limit

    return judge


TARGETS = (
    Target(
        "P1",
        f"PostgreSQL path: {MANY_LANES} lanes × 1 client, ours (one replica) / plain PG",
        f"≥ {PG_FLOOR:g}×",
        _ratio_of("pg1", "many", PG_FLOOR),
        ("pg1", "plain-pg"),
        "pg1",
    ),
    Target(
        "P2",
        f"PostgreSQL path: 1 lane × {CONTENDED_CLIENTS} granted, ours (one replica) / plain PG",
        f"≥ {PG_FLOOR:g}×",
        _ratio_of("pg1", "contended", PG_FLOOR),
        ("pg1", "plain-pg"),
        "pg1",
    ),
    Target(
        "P3",
        f"PostgreSQL path: coordinator CPU per cycle ({MANY_LANES} × 1)",
        f"≤ {PG_CPU_MS:g} ms",
        _cpu_of("pg1", PG_CPU_MS),
        ("pg1",),
        "pg1",
    ),
    Target(
        "P4",
        "PostgreSQL path: cross-replica hand-off (2 replicas)",
        f"p99 < {PG_HANDOFF_P99_MS:g} ms",
        _handoff_of("pg2", PG_HANDOFF_P99_MS),
        ("pg2",),
        "pg1",
    ),
    Target(
        "P5",
        f"SQLite path: {MANY_LANES} lanes × 1 client, ours / plain PG",
        f"≥ {SQLITE_FLOOR:g}×",
        _ratio_of("sqlite", "many", SQLITE_FLOOR),
        ("sqlite", "plain-pg"),
        "sqlite",
    ),
    Target(
        "P6",
        f"SQLite path: 1 lane × {CONTENDED_CLIENTS} granted, ours / plain PG",
        f"≥ {SQLITE_FLOOR:g}×",
        _ratio_of("sqlite", "contended", SQLITE_FLOOR),
        ("sqlite", "plain-pg"),
        "sqlite",
    ),
    Target(
        "P7",
        f"SQLite path: server CPU per cycle ({MANY_LANES} × 1)",
        f"≤ {SQLITE_CPU_MS:g} ms",
        _cpu_of("sqlite", SQLITE_CPU_MS),
        ("sqlite",),
        "sqlite",
    ),
    Target(
        "P8",
        "SQLite path: hand-off",
        f"p99 < {SQLITE_HANDOFF_P99_MS:g} ms",
        _handoff_of("sqlite", SQLITE_HANDOFF_P99_MS),
        ("sqlite",),
        "sqlite",
    ),
)


def judge(results: list[Result]) -> list[Row]:
    """One row per target; SKIPPED or ERROR where a system it reads has no figures."""
    by = {r.system.key: r for r in results}
    rows: list[Row] = []
    for t in TARGETS:
        missing = [k for k in t.needs if k not in by or by[k].skipped is not None]
        failed = [k for k in t.needs if k in by and by[k].error is not None]
        verdict: Verdict
        if missing:
            why = "; ".join(f"{k}: {by[k].skipped}" if k in by else f"{k} not run" for k in missing)
            text, verdict = f"SKIPPED: {why}", "SKIPPED"
        else:
            try:
                text, ok = t.judge(by)
            except ZeroDivisionError:
                text, ok = "nan", False
            if "nan" in text:  # a figure it reads was not measured: its system failed
                why = "; ".join(f"{k}: {by[k].error}" for k in failed) or "no figures"
                text, verdict = f"ERROR: {why}", "ERROR"
            else:
                verdict = "PASS" if ok else "MISS"
        why = _why_missed(t, by) if verdict == "MISS" else ""
        rows.append(Row(t.key, t.shape, text, t.target, verdict, why))
    return rows


def _why_missed(t: Target, by: dict[str, Result]) -> str:
    key = t.explained_by
    r = by.get(key)
    profile = r.profile if r is not None else None
    if r is not None and isinstance(profile, Profile):
        return f"profile of {r.system.title}, {MANY_LANES} × 1: {profile.summary()} ({WHERE})"
    if isinstance(profile, str):
        return f"no profile ({profile}); {WHERE}"
    return f"no profile taken (BENCH_PEER_PROFILE_SECONDS=0 or {key} not run); {WHERE}"


def profiles(results: list[Result]) -> str:
    """Each profiled system's whole breakdown, a line each."""
    lines = []
    for r in results:
        if isinstance(r.profile, Profile):
            shares = r.profile.shares_text()
            lines.append(f"- **{r.system.title}** ({r.profile.samples:,} samples): {shares}")
        elif isinstance(r.profile, str):
            lines.append(f"- **{r.system.title}**: SKIPPED: {r.profile}")
    return "\n".join(lines)


async def shape_peers(ctx: Context) -> None:
    """The `peers` shape of `python -m bench`: the run, the table, the notes, the targets."""
    s = ctx.s
    results = await run_peers(
        ctx.tmp,
        s.peer_systems,
        seconds=s.peer_seconds,
        rounds=s.peer_rounds,
        handoffs=s.peer_handoffs,
        pg_fsync=s.pg_fsync,
        profile_seconds=s.peer_profile_seconds,
    )
    print("\n## The peers, side by side\n", flush=True)
    print(table(results, s.peer_seconds, s.peer_rounds) + "\n", flush=True)
    print("What each lacks beside ours, and where it waits:\n", flush=True)
    print(notes(results) + "\n", flush=True)
    where = profiles(results)
    if where:
        print(
            "Where ours spends its CPU (py-spy --gil, one more 100 lanes × 1 client window; "
            "each sample counted against its innermost Python frame's module):\n",
            flush=True,
        )
        print(where + "\n", flush=True)
    for row in judge(results):
        ctx.report.add(row)
    for r in results:
        if r.error is not None:
            ctx.report.error(f"P-{r.system.key}", r.system.title, "measured", RuntimeError(r.error))
