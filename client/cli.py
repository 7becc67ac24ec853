"""`lane` — the driver computer's CLI (SPEC §7, §10).

Data goes to stdout (a readable table, or JSON with --json); messages and progress go to
stderr. Exit codes: 0 ok, 1 any other failure (including a ticket-level "no"), 2 usage
error, 3 pre-provider error (fail-closed: nothing may be submitted to the provider); 141,
quietly, when the reader of stdout went away (`lane history --json | head -1`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import os
import shutil
import signal
import subprocess
import sys
import webbrowser
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TextIO, TypeVar

from client.api import LaneBackend, LaneClient, safe_url
from client.clock import monotonic, wall
from client.config import (
    CLIENT_ENV_NAME,
    ENV_ACCOUNT,
    ENV_MACHINE,
    ENV_REQUIRED,
    ENV_URL,
    TOKEN_FILE_NAME,
    Settings,
    connect,
    keyring_set,
    load_settings,
    read_env_file,
    write_private_file,
)
from client.drill import DEFAULT_DRILL_LANE, DEFAULT_PARTNER_TIMEOUT, drill_lanes, run_drill
from client.errors import BadRequestError, LaneClientError, PreProviderError
from client.models import (
    CooldownReply,
    HeartbeatReply,
    HistoryReply,
    LaneReply,
    Pause,
    ReceiptReply,
    ReleaseReply,
    StatusReply,
    Ticket,
)
from client.receipts import check_payload
from client.selftest import run_self_test, self_test_lane
from coordinator import __version__
from coordinator.constants import MIN_TOKEN_BYTES
from coordinator.core.model import RELEASE_OUTCOMES, ReceiptPhase
from coordinator.errors import LaneError
from coordinator.names import MACHINE_RE, parse_lane

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_PRE_PROVIDER = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout went away (`lane ... | head -1`)
PHASES = tuple(p.value for p in ReceiptPhase)
CLIPBOARD_TOOLS: tuple[tuple[str, ...], ...] = (
    ("wl-copy",),
    ("xclip", "-selection", "clipboard"),
    ("xsel", "--clipboard", "--input"),
    ("pbcopy",),
)
DEFAULT_TRACE_INTERVAL = 30.0
TRACE_PROJECT = TRACE_PROMPT_HASH = "lane-trace"  # trace's request identity (scene: its claim)
SETUP_CHECK_LANE = "setup:check"

T = TypeVar("T")
_secrets: set[str] = set()  # values never to print (the token), redacted from any message


class UsageError(Exception):
    """A usage problem found after argument parsing (exit 2)."""


# ---------------------------------------------------------------------------- output


def redact(text: str) -> str:
    for s in _secrets:
        if s:
            text = text.replace(s, "***")
    return text


def say(message: str) -> None:
    print(redact(message), file=sys.stderr, flush=True)


def out(text: str) -> None:
    print(redact(text), flush=True)


def emit_json(data: Any) -> None:
    out(json.dumps(data, indent=2, ensure_ascii=False))


def fmt_secs(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def fmt_time(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def who(machine: str | None, claim: str | None) -> str:
    return f"{machine or '-'}·{claim}" if claim else (machine or "-")


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [len(h) for h in header]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def pause_line(p: Pause, now: float) -> str:
    return (
        f"paused — {p.reason_code} reported by {who(p.machine_id, p.claim_id)} "
        f"until {fmt_time(p.until)} ({fmt_secs(p.until - now)} left)"
    )


def ticket_rows(tickets: list[Ticket], now: float) -> list[list[str]]:
    rows = []
    for t in tickets:
        lease = fmt_secs(t.lease_expires_at - now) if t.lease_expires_at is not None else "-"
        rows.append(
            [
                t.state,
                t.ticket_id,
                who(t.machine_id, t.claim_id),
                f"{t.project}/{t.scene}",
                "-" if t.position is None else str(t.position),
                fmt_secs(t.eta_seconds) if t.state == "queued" else "-",
                "-" if t.fence is None else str(t.fence),
                lease,
            ]
        )
    return rows


def status_text(r: StatusReply, verbose: bool) -> str:
    lines = [
        f"lane {r.lane}  coordinator {r.coordinator}  enforced {'yes' if r.enforced else 'no'}  "
        f"capacity {r.capacity if r.capacity is not None else '-'}  held {len(r.held)}  "
        f"queued {r.queued_total if r.queued_total is not None else len(r.queued)}"
    ]
    if r.pause is not None:
        lines.append(pause_line(r.pause, r.now))
    tickets = r.held + r.queued
    if tickets:
        header = ["STATE", "TICKET", "MACHINE·CLAIM", "PROJECT/SCENE", "POS", "ETA", "FENCE"]
        lines.append(table(ticket_rows(tickets, r.now), [*header, "LEASE LEFT"]))
    else:
        lines.append("(no held or queued tickets)")
    if verbose:
        if r.recent_receipts is None:
            lines.append("receipts: none here (local queue or unenforced lane: no receipt trail)")
        else:
            rows = [
                [
                    rec.phase,
                    rec.ticket_id,
                    rec.machine_id,
                    {True: "verified", False: "MISMATCH", None: "unknown"}[
                        rec.content_hash_verified
                    ],
                    fmt_time(rec.created_at),
                    rec.receipt_id,
                ]
                for rec in r.recent_receipts
            ]
            header = ["PHASE", "TICKET", "MACHINE", "HASH", "CREATED", "RECEIPT ID"]
            lines.append(table(rows, header) if rows else "(no receipts)")
            lines.append(
                f"unreadable receipts: {r.unreadable_receipts}"
                + (" (trail complete)" if not r.unreadable_receipts else
                   " (rows this client could not read — an older CLI, not lost work)")
            )  # fmt: skip
    return "\n".join(lines)


def lane_reply_text(r: LaneReply) -> str:
    t = r.ticket
    if t.state == "queued":
        state = f"queued, position {t.position}, eta {fmt_secs(t.eta_seconds)}"
    elif t.state == "held":
        state = "held (granted to you)" if r.granted else "held by another driver (not granted)"
    else:
        state = t.state
    lines = [
        f"ticket     {t.ticket_id}",
        f"lane       {r.lane}  ({r.coordinator}{'' if r.enforced else ', unenforced'})",
        f"state      {state}",
        f"owner      {who(r.owner.machine_id, r.owner.claim_id)}",
        f"request    {t.project}/{t.scene}/{t.prompt_hash}",
        f"duplicate  {'yes' if r.duplicate else 'no'}",
    ]
    if t.fence is not None:
        lines.append(f"fence      {t.fence}")
    if t.lease_expires_at is not None:
        lines.append(f"lease      expires {fmt_time(t.lease_expires_at)}")
    if r.pause is not None:
        lines.append(pause_line(r.pause, wall()))
    return "\n".join(lines)


def history_text(r: HistoryReply) -> str:
    rows = [
        [
            fmt_time(e.ended_at),
            e.ticket_id,
            f"{e.project}/{e.scene}",
            who(e.machine_id, e.claim_id),
            e.outcome or "null",
            e.late_outcome or "-",
            fmt_secs(e.wait_seconds),
            fmt_secs(e.hold_seconds),
            e.provider_job_id or "-",
        ]
        for e in r.entries
    ]
    header = ["ENDED", "TICKET", "PROJECT/SCENE", "MACHINE·CLAIM", "OUTCOME", "LATE", "WAIT"]
    body = table(rows, [*header, "HOLD", "JOB"]) if rows else "(no finished tickets)"
    counts = ", ".join(f"{k} {v}" for k, v in r.counts.items()) or "none"
    return f"{body}\ncounts: {counts}\nretained: {r.retained}"


# ---------------------------------------------------------------------------- parser


class _HelpFormatter(argparse.HelpFormatter):
    """Each option's help ends with its parsed default when it has one — `(default: 30)`,
    a flag's `(default: off)`. A default that comes from the environment (parsed default
    None) is spelled out in the help text itself."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        d = action.default
        if not action.option_strings or d is None or d is argparse.SUPPRESS:
            return text
        if "%(default)" in text:
            return text
        if isinstance(d, bool):
            shown = "on" if d else "off"
        elif isinstance(d, float):
            shown = f"{d:g}"
        else:
            shown = str(d)
        return f"{text} (default: {shown.replace('%', '%%')})"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _positive(value: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be positive")
    return v


def _common() -> _Parser:
    p = _Parser(add_help=False)
    g = p.add_argument_group("lane and output")
    g.add_argument("--lane", help="the lane, route:account")
    g.add_argument("--route", help="the route (account from --account or LANE_ACCOUNT)")
    g.add_argument("--account", help="the account (default: LANE_ACCOUNT)")
    g.add_argument("--json", action="store_true", help="JSON on stdout")
    g.add_argument(
        "--timeout",
        type=_positive,
        help="per-call timeout, seconds (default: LANE_TIMEOUT_SECONDS, else 10)",
    )
    g.add_argument("--claim", help="claim id to send (default: LANE_CLAIM; none for hand calls)")
    return p


def _ticket_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ticket", required=True, help="the ticket id")


def _identity_args(p: argparse.ArgumentParser, required: bool) -> None:
    """The request identity: required for acquire; trace (not required) has its own."""
    p.add_argument(
        "--project",
        required=required,
        default=None if required else TRACE_PROJECT,
        help="the request's project",
    )
    p.add_argument(
        "--scene",
        required=required,
        help="the request's scene" + ("" if required else " (default: trace-<claim>)"),
    )
    p.add_argument(
        "--prompt-hash",
        required=required,
        default=None if required else TRACE_PROMPT_HASH,
        help="a hash of the prompt (never the prompt itself)",
    )
    p.add_argument(
        "--lease-seconds", type=float, help="lease length, 15-3600 s (default: the coordinator's)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="lane",
        description="Client of the lane coordinator (shared provider-account render queues).",
    )
    parser.add_argument("--version", action="version", version=f"lane {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    c = [_common()]

    p = sub.add_parser("status", parents=c, help="held and queued tickets, pause")
    p.add_argument("--verbose", action="store_true", help="also the recent receipt trail")

    p = sub.add_parser("acquire", parents=c, help="enqueue a request (granted when free)")
    _identity_args(p, required=True)

    p = sub.add_parser("await", parents=c, help="wait until the ticket is held")
    _ticket_arg(p)
    p.add_argument("--wait", type=float, default=30.0, help="long-poll length, 1-60 s")
    p.add_argument("--max-wait", type=_positive, help="give up after this many seconds")

    p = sub.add_parser("heartbeat", parents=c, help="extend a held lease")
    _ticket_arg(p)
    p.add_argument(
        "--lease-seconds",
        type=float,
        help="new lease length from now, 15-3600 s (default: the coordinator's)",
    )

    p = sub.add_parser("release", parents=c, help="finish a ticket")
    _ticket_arg(p)
    p.add_argument("--outcome", choices=RELEASE_OUTCOMES,
                   help="how the ticket ended (default: none, recorded as null)")  # fmt: skip
    p.add_argument("--provider-job", help="the provider's job id (<=256)")
    p.add_argument("--note", help="a short note (<=500)")

    p = sub.add_parser("receipt", parents=c, help="append an immutable receipt")
    _ticket_arg(p)
    p.add_argument("--phase", required=True, choices=PHASES, help="the receipt's phase")
    p.add_argument("--payload-file", required=True, help="JSON object file, or - for stdin")
    p.add_argument("--content-hash", help="override sha256:<hex> (a mismatch is flagged)")

    p = sub.add_parser("cooldown", parents=c, help="pause the lane (provider human check)")
    _ticket_arg(p)
    p.add_argument("--reason", default="provider-human-check", choices=["provider-human-check"],
                   help="why the lane pauses")  # fmt: skip
    p.add_argument("--retry-after", type=float,
                   help="pause length, 30-7200 s "
                   "(default: LANE_HUMAN_CHECK_COOLDOWN_SECONDS, else 900)")  # fmt: skip

    p = sub.add_parser("history", parents=c, help="the render log, newest first")
    p.add_argument("--limit", type=int, default=100, help="how many entries, 1-5000")
    p.add_argument("--project", help="only this project's entries (default: every project)")

    p = sub.add_parser("trace", parents=c, help="hold a ticket and log every interval")
    _identity_args(p, required=False)
    p.add_argument("--interval", type=_positive, default=DEFAULT_TRACE_INTERVAL,
                   help="seconds between heartbeats (one log line each)")  # fmt: skip

    p = sub.add_parser("self-test", parents=c, help="engine checks on a dedicated test lane")

    p = sub.add_parser("drill", help="the two-computer acceptance drill (no provider, no credits)")
    p.add_argument("--role", required=True, choices=["a", "b"], help="this computer's role")
    p.add_argument("--lane", help=f"the drill lane, route:account (default: {DEFAULT_DRILL_LANE})")
    p.add_argument("--route", help="the drill route (default: drill)")
    p.add_argument("--account", help="the drill account (default: acceptance)")
    p.add_argument("--timeout", dest="partner_timeout", type=_positive, metavar="SECONDS",
                   default=DEFAULT_PARTNER_TIMEOUT,
                   help="seconds to wait for the other role at any step")  # fmt: skip
    p.add_argument("--partition", action="store_true",
                   help="also step 7: B's network is cut mid-lease (cut and restore it when "
                   "the ACTION lines say so; scripts/drill-netns.sh does)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="JSON on stdout (progress on stderr)")
    p.add_argument("--claim", help="claim id to send (default: LANE_CLAIM, else a new uuid4)")
    p.set_defaults(timeout=None)  # per-call timeout: LANE_TIMEOUT_SECONDS

    p = sub.add_parser("setup", parents=c, help="enrol this computer (token + settings)")
    p.add_argument("url", help="the coordinator's base URL (http:// or https://)")
    p.add_argument("machine_id", help="this computer's stable, unique name (1-64 of A-Za-z0-9._-)")
    p.add_argument("--not-required", action="store_true", help="do not write LANE_REQUIRED=1")

    sub.add_parser("dashboard", parents=c, help="open the control room; token to clipboard")
    return parser


# ---------------------------------------------------------------------------- helpers


def resolve_lane(args: argparse.Namespace, settings: Settings) -> str:
    if args.lane:
        if args.route or args.account:
            raise UsageError("give --lane route:account, or --route with --account, not both")
        lane: str = args.lane
    elif args.route:
        account = args.account or settings.account
        if not account:
            if settings.required:
                raise PreProviderError(
                    f"no account: --route {args.route} needs --account or {ENV_ACCOUNT}"
                )
            raise UsageError(f"--route {args.route} needs --account (or {ENV_ACCOUNT})")
        lane = f"{args.route}:{account}"
    else:
        raise UsageError("one of --lane route:account or --route is required")
    try:
        parse_lane(lane)
    except LaneError as exc:
        raise UsageError(exc.message) from None
    return lane


def load_cli_settings(args: argparse.Namespace, *, mint_claim: bool = False) -> Settings:
    s = load_settings(claim_id=args.claim, timeout=args.timeout, mint_claim=mint_claim)
    if s.token:
        _secrets.add(s.token)
    return s


async def with_backend(settings: Settings, fn: Callable[[LaneBackend], Awaitable[T]]) -> T:
    backend = connect(settings)
    try:
        return await fn(backend)
    finally:
        await backend.close()


def read_payload(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--payload-file: cannot read {path}: {exc.strerror}") from None
    try:
        payload = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--payload-file: not valid JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise UsageError("--payload-file: must hold a JSON object")
    return payload


# ---------------------------------------------------------------------------- commands


async def cmd_simple(args: argparse.Namespace, settings: Settings, lane: str) -> int:
    async def run(b: LaneBackend) -> int:
        cmd = args.command
        if cmd == "status":
            st = await b.status(lane, include_receipts=args.verbose)
            if args.json:
                emit_json(st.to_wire())
            else:
                out(status_text(st, args.verbose))
            return EXIT_OK
        if cmd == "acquire":
            r = await b.acquire(
                lane, args.project, args.scene, args.prompt_hash, args.lease_seconds
            )
            emit_json(r.to_wire()) if args.json else out(lane_reply_text(r))
            if r.duplicate and not r.granted and r.ticket.state == "held":
                say(
                    f"lane: duplicate request — held by {who(r.owner.machine_id, r.owner.claim_id)}"
                )
            return EXIT_OK
        if cmd == "heartbeat":
            h = await b.heartbeat(lane, args.ticket, args.lease_seconds)
            return _heartbeat_out(args, h)
        if cmd == "release":
            rel = await b.release(lane, args.ticket, args.outcome, args.provider_job, args.note)
            return _release_out(args, rel)
        if cmd == "receipt":
            payload = read_payload(args.payload_file)
            try:  # SPEC §8: hashes, ids and counts — never a prompt, a path, a token, an account
                check_payload(payload, lane=lane)
            except ValueError as exc:
                raise UsageError(f"--payload-file: {exc}") from None
            rec = await b.receipt(lane, args.ticket, args.phase, payload, args.content_hash)
            return _receipt_out(args, rec)
        if cmd == "cooldown":
            retry = args.retry_after or settings.human_check_cooldown_seconds
            cd = await b.cooldown(lane, args.ticket, retry, args.reason)
            return _cooldown_out(args, cd)
        if cmd == "history":
            hist = await b.history(lane, args.limit, args.project)
            emit_json(hist.to_wire()) if args.json else out(history_text(hist))
            return EXIT_OK
        raise UsageError(f"unknown command {cmd}")

    return await with_backend(settings, run)


def _heartbeat_out(args: argparse.Namespace, h: HeartbeatReply) -> int:
    if args.json:
        emit_json(h.to_wire())
    elif h.refreshed:
        left = fmt_secs(h.lease_expires_at - wall()) if h.lease_expires_at else "-"
        out(f"refreshed  yes\nstate      {h.state}\nlease      {left} left\nfence      {h.fence}")
    else:
        out(f"refreshed  no\nstate      {h.state}\nreason     {h.reason}")
    if not h.refreshed:
        say(f"lane: heartbeat not refreshed: {h.reason}")
    return EXIT_OK if h.refreshed else EXIT_FAIL


def _release_out(args: argparse.Namespace, r: ReleaseReply) -> int:
    if args.json:
        emit_json(r.to_wire())
    else:
        lines = [
            f"released   {'yes' if r.released else 'no'}",
            f"state      {r.state}",
            f"outcome    {r.outcome or 'null'}",
            f"promoted   {', '.join(r.promoted) or '-'}",
        ]
        if r.reason:
            lines.append(f"reason     {r.reason}")
        out("\n".join(lines))
    if not r.released:
        say(f"lane: not released: {r.reason}")
    return EXIT_OK if r.released else EXIT_FAIL


def _receipt_out(args: argparse.Namespace, r: ReceiptReply) -> int:
    if args.json:
        emit_json(r.to_wire())
    else:
        verified = {True: "yes", False: "NO (stored and flagged)", None: "unknown"}
        out(
            f"receipt    {r.receipt_id}\nstored     {'yes' if r.stored else 'no'}\n"
            f"replay     {'yes' if r.replay else 'no'}\n"
            f"hash       {r.content_hash} (verified: {verified[r.content_hash_verified]})"
        )
    if r.coordinator != "actor-sqlite" and not r.stored:
        say("lane: the local queue keeps no receipts; nothing was stored")
    return EXIT_OK


def _cooldown_out(args: argparse.Namespace, r: CooldownReply) -> int:
    if args.json:
        emit_json(r.to_wire())
    elif r.pause is not None:
        out(pause_line(r.pause, wall()) + ("  (extended)" if r.extended else ""))
    else:
        out("paused     no (unenforced lane)")
    if r.paused and r.pause is not None:
        where = "every computer" if r.coordinator == "actor-sqlite" else "this computer"
        say(f"lane: paused {r.pause.reason_code} on {where} until {fmt_time(r.pause.until)}")
    return EXIT_OK


class _Progress:
    """await's progress on stderr: a live line on a TTY, plain lines only on change otherwise;
    the pause notice exactly once per pause."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self.last_key: tuple[Any, ...] | None = None
        self.pause_shown = False
        self.reply: LaneReply | None = None
        self.at = monotonic()
        self._width = 0

    def update(self, r: LaneReply) -> None:
        self.reply, self.at = r, monotonic()
        if r.pause is not None and r.ticket.state == "queued":
            if not self.pause_shown:
                self.clear()
                by = r.pause.machine_id
                print(f"paused — {r.pause.reason_code} reported by {by}", file=self.stream)
                self.pause_shown = True
        elif r.pause is None:
            self.pause_shown = False
        if r.ticket.state != "queued":
            return
        key = (r.ticket.state, r.ticket.position, r.pause is not None)
        if self.live:
            self.draw()
        elif key != self.last_key:
            print(self.line(plain=True), file=self.stream, flush=True)
        self.last_key = key

    def line(self, plain: bool = False) -> str:
        r = self.reply
        assert r is not None
        t = r.ticket
        eta = t.eta_seconds or 0.0
        if not plain:
            eta = max(0.0, eta - (monotonic() - self.at))
        text = f"queued · position {t.position} · eta {fmt_secs(eta)}"
        if r.pause is not None:
            text += f" · paused {fmt_secs(r.pause.until - wall())} left"
        return text

    def draw(self) -> None:
        if self.live and self.reply is not None and self.reply.ticket.state == "queued":
            text = self.line()
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self.stream.flush()
            self._width = len(text)

    def clear(self) -> None:
        if self.live and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0


async def cmd_await(args: argparse.Namespace, settings: Settings, lane: str) -> int:
    if not 1 <= args.wait <= 60:
        raise UsageError("--wait: must be between 1 and 60 seconds")
    progress = _Progress(sys.stderr)

    async def ticker() -> None:
        while True:
            await asyncio.sleep(1.0)
            progress.draw()

    async def run(b: LaneBackend) -> int:
        deadline = None if args.max_wait is None else monotonic() + args.max_wait
        tick = asyncio.create_task(ticker()) if progress.live else None
        try:
            # A short first poll, so the position shows at once; then full long polls.
            r = await b.await_ticket(lane, args.ticket, _step(1.0, deadline))
            progress.update(r)
            while r.ticket.state == "queued":
                if deadline is not None and deadline - monotonic() <= 0:
                    break
                r = await b.await_ticket(lane, args.ticket, _step(args.wait, deadline))
                progress.update(r)
        finally:
            if tick is not None:
                tick.cancel()
            progress.clear()
        emit_json(r.to_wire()) if args.json else out(lane_reply_text(r))
        if r.ticket.state == "held" and r.granted:
            return EXIT_OK
        if r.ticket.state == "queued":
            say(
                f"lane: still queued after {fmt_secs(args.max_wait)} (position {r.ticket.position})"
            )
        else:
            say(f"lane: ticket {r.ticket_id} is {r.ticket.state}; it will not be granted")
        return EXIT_FAIL

    return await with_backend(settings, run)


def _step(wait: float, deadline: float | None) -> float:
    if deadline is None:
        return wait
    return max(1.0, min(wait, deadline - monotonic()))


async def _until(stop: asyncio.Event, aw: Awaitable[T], timeout: float | None = None) -> T | None:
    """`aw`'s result, or None when `stop` is set (or `timeout` passes) first."""
    task = asyncio.ensure_future(aw)
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({task, stopper}, timeout=timeout, return_when="FIRST_COMPLETED")
    stopper.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, LaneClientError):
        await task
    return None


async def cmd_trace(args: argparse.Namespace, settings: Settings, lane: str) -> int:
    claim = settings.claim_id or "no-claim"
    project = args.project or TRACE_PROJECT
    scene = args.scene or f"trace-{claim}"[:128]
    prompt_hash = args.prompt_hash or TRACE_PROMPT_HASH
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)

    def log(event: str, **fields: Any) -> None:
        if args.json:
            out(json.dumps({"at": wall(), "event": event, **fields}))
        else:
            extra = "  ".join(f"{k}={v}" for k, v in fields.items())
            out(f"{fmt_time(wall())}  {event:<9} {extra}")

    async def run(b: LaneBackend) -> int:
        r = await b.acquire(lane, project, scene, prompt_hash, args.lease_seconds)
        tid = r.ticket_id
        code = EXIT_OK
        try:  # from here on the ticket is released whatever happens (a closed stdout too)
            log("acquire", ticket=tid, state=r.ticket.state, granted=r.granted,
                position=r.ticket.position, claim=claim)  # fmt: skip
            while not stop.is_set():
                hb = await b.heartbeat(lane, tid, args.lease_seconds)
                st = await b.status(lane)
                held = [who(t.machine_id, t.claim_id) + ":" + t.ticket_id for t in st.held]
                queued = [who(t.machine_id, t.claim_id) + ":" + t.ticket_id for t in st.queued]
                left = (
                    None if hb.lease_expires_at is None else round(hb.lease_expires_at - st.now, 1)
                )
                log("heartbeat", refreshed=hb.refreshed, reason=hb.reason, state=hb.state,
                    leaseLeft=left, fence=hb.fence, held=held, queued=queued,
                    pause=st.pause.reason_code if st.pause else None)  # fmt: skip
                if hb.state in ("done", "expired"):
                    say(f"lane: trace ticket {tid} is {hb.state}; stopping")
                    code = EXIT_FAIL
                    break
                if hb.state == "queued":
                    # SPEC 4.2: waitSeconds is 1-60, whatever the interval
                    wait = max(1.0, min(args.interval, 60.0))
                    await _until(stop, b.await_ticket(lane, tid, wait))
                else:
                    await _until(stop, asyncio.sleep(args.interval))
        finally:
            rel = await b.release(lane, tid, "not-submitted", None, "lane trace")
            log("release", ticket=tid, released=rel.released, state=rel.state, reason=rel.reason)
        return code

    return await with_backend(settings, run)


async def cmd_self_test(args: argparse.Namespace, settings: Settings) -> int:
    lane = self_test_lane(args.lane, args.route, args.account, settings)
    return await run_self_test(settings, lane, json_out=args.json, emit=out, warn=say)


async def cmd_setup(args: argparse.Namespace) -> int:
    url = args.url.strip().rstrip("/")
    if not (url.startswith("http://") or url.startswith("https://")):
        raise UsageError("URL: must start with http:// or https://")
    if not MACHINE_RE.match(args.machine_id):
        raise UsageError("MACHINE_ID: must be 1-64 of [A-Za-z0-9._-]")
    if sys.stdin.isatty():
        token = getpass.getpass("Coordinator token (input hidden): ").strip()
    else:
        token = (sys.stdin.readline() or "").strip()
    if not token:
        say("lane: setup: no token given (type it at the prompt, or pipe it on stdin)")
        return EXIT_FAIL
    _secrets.add(token)
    if len(token.encode()) < MIN_TOKEN_BYTES:
        say(f"lane: setup: that token is {len(token.encode())} bytes; coordinator tokens are "
            f"at least {MIN_TOKEN_BYTES}")  # fmt: skip
        return EXIT_FAIL
    # Verify first, write after: a token the coordinator rejects (or a coordinator that cannot
    # be reached, or is not the shared one) leaves no token, keyring entry or client.env.
    lane = args.lane or SETUP_CHECK_LANE
    try:
        parse_lane(lane)
    except LaneError as exc:
        raise UsageError(exc.message) from None
    client = LaneClient(url, token, args.machine_id, None, timeout=args.timeout or 10.0,
                        required=True)  # fmt: skip
    try:
        st = await client.status(lane)  # an authenticated read; it creates nothing
    except LaneClientError as exc:
        say(f"lane: setup check failed: {exc}")
        say("lane: setup: nothing was written (no token stored, settings unchanged)")
        return EXIT_PRE_PROVIDER
    finally:
        await client.close()
    base = load_settings(mint_claim=False, use_keyring=False)
    cdir = base.config_dir
    backend = keyring_set(url, token)
    if backend is not None:
        say(f"lane: token stored in the OS keyring ({backend})")
    else:
        write_private_file(cdir / TOKEN_FILE_NAME, token + "\n")
        say(f"lane: no OS keyring works here; token stored in {cdir / TOKEN_FILE_NAME} (mode 0600)")
    env_path = cdir / CLIENT_ENV_NAME
    values = read_env_file(env_path)
    values.pop("LANE_TOKEN", None)
    values[ENV_URL] = url
    values[ENV_MACHINE] = args.machine_id
    if args.account:
        values[ENV_ACCOUNT] = args.account
    if args.not_required:
        values.pop(ENV_REQUIRED, None)
    else:
        values[ENV_REQUIRED] = "1"
    text = "# lane client settings (non-secret), written by `lane setup`\n" + "".join(
        f"{k}={v}\n" for k, v in values.items()
    )
    write_private_file(env_path, text)
    say(f"lane: settings written to {env_path} (mode 0600)")
    out(f'"coordinator": "{st.coordinator}"')
    say(f"lane: {safe_url(url)} answers as the shared coordinator; this computer is "
        f"{args.machine_id}")  # fmt: skip
    return EXIT_OK


def cmd_dashboard(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.url:
        say(f"lane: dashboard: {ENV_URL} is unset (run `lane setup URL MACHINE_ID`)")
        return EXIT_PRE_PROVIDER if settings.required else EXIT_FAIL
    page = f"{safe_url(settings.url)}/control-room"
    copied = None
    if settings.token:
        for tool in CLIPBOARD_TOOLS:
            exe = shutil.which(tool[0])
            if exe is None:
                continue
            try:
                done = subprocess.run(
                    [exe, *tool[1:]],
                    input=settings.token.encode(),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=5,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError):
                continue
            if done.returncode == 0:
                copied = tool[0]
                break
    opened = False
    with contextlib.suppress(Exception):
        opened = webbrowser.open(page)
    out(page)
    if not opened:
        say(f"lane: open {page} in a browser")
    if copied:
        say(f'lane: token copied to the clipboard ({copied}); paste it into "Unlock ledger"')
    elif settings.token:
        say("lane: no clipboard tool (wl-copy, xclip, xsel, pbcopy) worked; paste the token "
            f"into \"Unlock ledger\" from {settings.token_source}")  # fmt: skip
    else:
        say("lane: no token configured; run `lane setup URL MACHINE_ID` first")
        return EXIT_FAIL
    return EXIT_OK


async def dispatch(args: argparse.Namespace) -> int:
    cmd = args.command
    if cmd == "setup":
        return await cmd_setup(args)
    settings = load_cli_settings(args, mint_claim=cmd in ("trace", "self-test", "drill"))
    if cmd == "dashboard":
        for w in settings.warnings:
            say(w)
        return cmd_dashboard(args, settings)
    if cmd == "self-test":
        return await cmd_self_test(args, settings)
    if cmd == "drill":
        lane, barrier = drill_lanes(args.lane, args.route, args.account, settings)
        return await run_drill(settings, lane, barrier, args.role, timeout=args.partner_timeout,
                               partition=args.partition, json_out=args.json, emit=out,
                               warn=say)  # fmt: skip
    lane = resolve_lane(args, settings)
    if cmd == "await":
        return await cmd_await(args, settings, lane)
    if cmd == "trace":
        return await cmd_trace(args, settings, lane)
    return await cmd_simple(args, settings, lane)


def main(argv: list[str] | None = None) -> int:
    """The `lane` console script. A reader that goes away (`lane history --json | head -1`)
    ends it quietly with EXIT_BROKEN_PIPE (141, as a shell reports a tool that SIGPIPE
    ended), never "unexpected error"; cleanup still runs (trace releases its ticket)."""
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # a closed stdout raises here, not in the interpreter's last flush
    except BrokenPipeError:
        _drop_closed_output()
        return EXIT_BROKEN_PIPE


def _drop_closed_output() -> None:
    """Point stdout (and stderr, when it is closed too) at /dev/null, so the interpreter's
    final flush cannot raise BrokenPipeError again; what was not written is dropped."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
            try:
                sys.stderr.flush()
            except OSError:
                os.dup2(devnull, sys.stderr.fileno())
        finally:
            os.close(devnull)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return asyncio.run(dispatch(args))
    except UsageError as exc:
        sub = getattr(args, "command", None)
        say(f"usage: lane {sub or ''} ... (see lane {sub or ''} --help)".replace("  ", " "))
        say(f"lane: error: {exc}")
        return EXIT_USAGE
    except PreProviderError as exc:
        say(f"lane: {exc}")
        return EXIT_PRE_PROVIDER
    except BadRequestError as exc:  # the coordinator refused a value we passed on: usage
        say(f"lane: {exc}")
        return EXIT_USAGE
    except LaneClientError as exc:
        say(f"lane: {exc}")
        return EXIT_FAIL
    except KeyboardInterrupt:
        say("lane: interrupted")
        return 130
    except BrokenPipeError:  # stdout's reader went away: main() ends quietly
        raise
    except Exception as exc:  # never a traceback (it could carry a header or a token)
        say(f"lane: unexpected error: {type(exc).__name__}: {exc}")
        return EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
