"""The SQLite shapes 1-8: each runner measures, then adds its rows (figure, target, PASS/MISS)
to the report. `ROWS` names every row a shape adds, so a shape that fails still prints its
rows, as ERROR."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.common import pct
from bench.context import Context
from bench.latency import alarm_lateness, handoff
from bench.load import Cycles, compare, lanes
from bench.report import num, ratio
from bench.restart import Restart, restart_shape
from bench.scale import QUIET_FD_SLACK, busy_under_fd_limit, memory_and_fds
from bench.servers import running, start_coordinator
from bench.settings import Settings

HANDOFF_P99_MS = 5.0
ALARM_P99_MS = 10.0
RSS_MB = 150.0
CPU_MS_PER_CYCLE = 0.6  # 100 lanes × 1 client
FLOORS = {"1": 0.4, "2": 0.7, "3": 0.5}  # cycles/s as a fraction of the bare handler's
FIRED_AFTER_LISTEN_S = 5.0  # "every due alarm fires at once": within this of listening


def rows(s: Settings) -> dict[str, list[tuple[str, str, str]]]:
    """shape -> its rows: (key, shape, target)."""
    return {
        "1": [
            ("1a", "100 lanes × 1 client: cycles/s", f"≥ {FLOORS['1']:g}× bare"),
            ("1b", "100 lanes × 1 client: server CPU/cycle", f"≤ {CPU_MS_PER_CYCLE:g} ms"),
        ],
        "2": [("2", "1 lane × 16 clients: cycles/s", f"≥ {FLOORS['2']:g}× bare")],
        "3": [("3", "1 lane × 1 client: cycles/s", f"≥ {FLOORS['3']:g}× bare")],
        "4": [("4", "hand-off: release → parked await", f"p99 < {HANDOFF_P99_MS:g} ms")],
        "5": [
            (
                "5",
                f"alarm lateness, {num(s.alarm_lanes)} lanes armed",
                f"p99 < {ALARM_P99_MS:g} ms",
            )
        ],
        "6": [
            ("6a", f"RSS, {num(s.memory_lanes)} lanes with a live ticket", f"≤ {RSS_MB:g} MB"),
            ("6b", f"fds, {num(s.memory_lanes)} live lanes → quiet", "a quiet lane holds no fd"),
        ],
        "7": [
            (
                "7",
                f"{num(s.fd_lanes)} busy lanes, ulimit -n {s.fd_limit}: errors",
                "0 errors",
            )
        ],
        "8": [
            (
                "8a",
                f"restart, {num(s.restart_small)} lanes: listen / due alarms fired",
                f"fired ≤ listen + {FIRED_AFTER_LISTEN_S:g} s",
            ),
            (
                "8b",
                f"restart, {num(s.restart_lanes)} lanes: listen / due alarms fired",
                f"listen ≤ max(2×, +1 s) of 8a; fired ≤ listen + {FIRED_AFTER_LISTEN_S:g} s",
            ),
        ],
    }


def cycles_result(bare: Cycles, coord: Cycles, cpu: bool = True) -> str:
    text = f"{num(coord.per_second)}/s vs bare {num(bare.per_second)}/s = "
    text += ratio(coord.per_second / bare.per_second)
    if cpu:
        text += f"; CPU {coord.cpu_ms:.2f} ms/cycle (bare {bare.cpu_ms:.2f})"
    return text


async def _throughput(ctx: Context, shape_no: str, n: int, c: int) -> Cycles:
    """n lanes × c clients against the bare handler; adds the shape's first row."""
    bare, coord = await compare(
        ctx.bare(), ctx.main(), lanes(f"c{n}x{c}", n), c, ctx.s.seconds, ctx.s.rounds
    )
    key, shape, target = rows(ctx.s)[shape_no][0]
    ctx.figures[key] = coord
    r = coord.per_second / bare.per_second
    ctx.report.row(key, shape, cycles_result(bare, coord), target, r >= FLOORS[shape_no])
    if shape_no == "1":
        key, shape, target = rows(ctx.s)["1"][1]
        result = f"{coord.cpu_ms:.2f} ms (bare {bare.cpu_ms:.2f} ms)"
        ctx.report.row(key, shape, result, target, coord.cpu_ms <= CPU_MS_PER_CYCLE)
    return coord


async def shape1(ctx: Context) -> None:
    await _throughput(ctx, "1", 100, 1)


async def shape2(ctx: Context) -> None:
    await _throughput(ctx, "2", 1, 16)


async def shape3(ctx: Context) -> None:
    await _throughput(ctx, "3", 1, 1)


def latency(values: list[float], what: str = "") -> str:
    return f"p50 {pct(values, 50):.1f} ms, p99 {pct(values, 99):.1f} ms (n={len(values)}{what})"


async def shape4(ctx: Context) -> None:
    url = ctx.main().url
    gaps = await handoff(url, url, "bench:handoff", ctx.s.handoff_samples)
    key, shape, target = rows(ctx.s)["4"][0]
    ctx.report.row(key, shape, latency(gaps), target, pct(gaps, 99) < HANDOFF_P99_MS)


async def shape5(ctx: Context) -> None:
    srv = start_coordinator(ctx.tmp, "alarms", ctx.config("alarms"))
    with running(srv):
        late, promoted = await alarm_lateness(srv.url, ctx.s.alarm_lanes, ctx.s.alarm_spread)
    key, shape, target = rows(ctx.s)["5"][0]
    result = latency(late, f", max {max(late):.1f}")
    result += f"; heldAt − expiry p99 {pct(promoted, 99):.1f} ms"
    ctx.report.row(key, shape, result, target, pct(late, 99) < ALARM_P99_MS)


async def shape6(ctx: Context) -> None:
    m = await memory_and_fds(ctx.tmp, ctx.s.memory_lanes, ctx.s.quiet_seconds)
    (ka, sa, ta), (kb, sb, _) = rows(ctx.s)["6"]
    ctx.report.row(ka, sa, f"{m.rss:.0f} MB (idle server {m.base_rss:.0f} MB)", ta, m.rss <= RSS_MB)
    result = (
        f"{num(m.fds)} live → {num(m.quiet_fds)} after {m.quiet_seconds:.0f} s quiet "
        f"(idle server {m.base_fds})"
    )
    target = f"quiet ≤ idle + {QUIET_FD_SLACK} (no fd per lane)"
    ctx.report.row(kb, sb, result, target, m.quiet_fds <= m.base_fds + QUIET_FD_SLACK)


async def shape7(ctx: Context) -> None:
    f = await busy_under_fd_limit(ctx.tmp, ctx.s.fd_lanes, ctx.s.fd_limit, ctx.s.fd_rounds)
    result = f"{num(f.errors)} errors / {num(f.requests)} requests, peak {f.peak_fds} fds"
    if not f.alive:
        result += ", the server died"
    if f.examples:
        result += f"; first: {f.examples[0]}"
    key, shape, target = rows(ctx.s)["7"][0]
    ctx.report.row(key, shape, result, target, f.errors == 0 and f.alive)


def _restart_result(r: Restart) -> str:
    fired = f"{r.fired:.2f} s" if r.fired is not None else f"not all ({r.fired_count}/{r.due})"
    text = f"listen {r.listen:.2f} s, fired {fired} ({num(r.due)} due, down {r.downtime:.0f} s)"
    text += f"; created {num(r.created)} lanes in {r.create_seconds:.0f} s"
    if r.errors:
        text += f", {num(r.errors)} errors (first: {r.example})"
    return text


def _fired_in_time(r: Restart) -> bool:
    return r.fired is not None and r.fired - r.listen <= FIRED_AFTER_LISTEN_S and r.errors == 0


async def shape8(ctx: Context) -> None:
    (ka, sa, ta), (kb, sb, tb) = rows(ctx.s)["8"]
    small: Restart | None = None
    try:
        small = await restart_shape(ctx.tmp, "restart-small", ctx.s.restart_small)
        ctx.report.row(ka, sa, _restart_result(small), ta, _fired_in_time(small))
    except Exception as exc:
        ctx.report.error(ka, sa, ta, exc)
    big = await restart_shape(ctx.tmp, "restart-big", ctx.s.restart_lanes)
    ok = _fired_in_time(big)
    if small is not None:
        ok = ok and big.listen <= max(2 * small.listen, small.listen + 1.0)
    ctx.report.row(kb, sb, _restart_result(big), tb, ok)


RUNNERS: dict[str, Callable[[Context], Awaitable[None]]] = {
    "1": shape1,
    "2": shape2,
    "3": shape3,
    "4": shape4,
    "5": shape5,
    "6": shape6,
    "7": shape7,
    "8": shape8,
}
