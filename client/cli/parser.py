"""The `lane` command line: every command's options (`build_parser`). Each option's help
ends with its default; a usage error exits 2."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from client.cli.exits import EXIT_USAGE
from client.drill import DEFAULT_DRILL_LANE, DEFAULT_PARTNER_TIMEOUT
from coordinator import __version__
from coordinator.engine.model import RECONCILE_OUTCOMES, RELEASE_OUTCOMES, ReceiptPhase

PHASES = tuple(p.value for p in ReceiptPhase)
DEFAULT_TRACE_INTERVAL = 30.0
TRACE_PROJECT = TRACE_PROMPT_HASH = "lane-trace"  # trace's request identity (scene: its claim)


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
    """A usage error exits 2 (EXIT_USAGE) after the usage line; build_parser gives every
    parser `_HelpFormatter`."""

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


def _common(
    route: str = "the route (account from --account or LANE_ACCOUNT)",
    account: str = "the account (default: LANE_ACCOUNT)",
) -> _Parser:
    p = _Parser(add_help=False)
    g = p.add_argument_group("lane and output")
    g.add_argument("--lane", help="the lane, route:account")
    g.add_argument("--route", help=route)
    g.add_argument("--account", help=account)
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
    for flag, trace_default, text in (
        ("--project", TRACE_PROJECT, "the request's project"),
        (
            "--scene",
            None,
            "the request's scene" + ("" if required else " (default: trace-<claim>)"),
        ),
        ("--prompt-hash", TRACE_PROMPT_HASH, "a hash of the prompt (never the prompt itself)"),
    ):
        default = None if required else trace_default
        p.add_argument(flag, required=required, default=default, help=text)
    p.add_argument(
        "--lease-seconds", type=float, help="lease length, 15-3600 s (default: the coordinator's)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="lane",
        description="Client of the lane coordinator (shared provider-account render queues).",
        formatter_class=_HelpFormatter,
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
    p.add_argument("--max-wait", type=_positive,
                   help="give up after this many seconds (default: no limit, until the "
                   "ticket is held or ends)")  # fmt: skip

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

    p = sub.add_parser("reconcile", parents=c, help="end an ended ticket's in-flight job")
    _ticket_arg(p)
    p.add_argument("--outcome", required=True, choices=RECONCILE_OUTCOMES,
                   help="how the provider job ended (not-found: it has none)")  # fmt: skip
    p.add_argument("--provider-job-id", help="the provider's job id (<=256)")
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

    self_test = _common(
        route="the test lane's route (default: self-test)",
        account="the test lane's account (default: LANE_SELF_TEST_ACCOUNT, else self-test; "
        "main-unlimited and LANE_ACCOUNT's account are refused)",
    )
    p = sub.add_parser("self-test", parents=[self_test],
                       help="engine checks on a dedicated test lane")  # fmt: skip

    p = sub.add_parser("drill", help="the two-computer acceptance drill (no provider, no credits)")
    p.add_argument("--role", required=True, choices=["a", "b"], help="this computer's role")
    p.add_argument("--lane", help=f"the drill lane, route:account (default: {DEFAULT_DRILL_LANE})")
    p.add_argument("--route", help="the drill route (default: drill)")
    p.add_argument("--account", help="the drill account (default: acceptance)")
    p.add_argument("--timeout", dest="partner_timeout", type=_positive, metavar="SECONDS",
                   default=DEFAULT_PARTNER_TIMEOUT,
                   help="seconds to wait for the other role at any step")  # fmt: skip
    p.add_argument("--partition", action="store_true",
                   help="also step 8: B's network is cut mid-lease (cut and restore it when "
                   "the ACTION lines say so; scripts/drill-netns.sh does)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="JSON on stdout (progress on stderr)")
    p.add_argument("--claim", help="claim id to send (default: LANE_CLAIM, else a new uuid4)")
    p.set_defaults(timeout=None)  # per-call timeout: LANE_TIMEOUT_SECONDS

    p = sub.add_parser("setup", parents=c, help="enrol this computer (token + settings)")
    p.add_argument("url", help="the coordinator's base URL (http:// or https://)")
    p.add_argument("machine_id", help="this computer's stable, unique name (1-64 of A-Za-z0-9._-)")
    p.add_argument("--not-required", action="store_true", help="do not write LANE_REQUIRED=1")

    sub.add_parser("dashboard", parents=c, help="open the control room; token to clipboard")
    for command in sub.choices.values():
        command.formatter_class = _HelpFormatter
    return parser


__all__ = [
    "DEFAULT_TRACE_INTERVAL",
    "PHASES",
    "TRACE_PROJECT",
    "TRACE_PROMPT_HASH",
    "build_parser",
]
