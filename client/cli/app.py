"""`lane` — the driver computer's CLI (docs/protocol.md#client-config,
docs/protocol.md#cli-exit-codes): `main` parses, dispatches and maps errors to exit codes.

Data goes to stdout (a readable table, or JSON with --json); messages and progress go to
stderr. Exit codes: 0 ok, 1 any other failure (including a ticket-level "no"), 2 usage
error, 3 pre-provider error (fail-closed: nothing may be submitted to the provider); 130
interrupted (Ctrl-C); 141, quietly, when the reader of stdout went away
(`lane history --json | head -1`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys

from client.cli.commands import cmd_simple, load_cli_settings, resolve_lane
from client.cli.exits import (
    EXIT_BROKEN_PIPE,
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_PRE_PROVIDER,
    EXIT_USAGE,
    UsageError,
)
from client.cli.follow import cmd_await, cmd_trace
from client.cli.parser import build_parser
from client.cli.render import out, say
from client.cli.setup import cmd_dashboard, cmd_setup, read_token
from client.config import Settings
from client.drill import drill_lanes, run_drill, run_self_test, self_test_lane
from client.errors import BadRequestError, LaneClientError, PreProviderError


async def cmd_self_test(args: argparse.Namespace, settings: Settings) -> int:
    lane = self_test_lane(args.lane, args.route, args.account, settings)
    return await run_self_test(settings, lane, json_out=args.json, emit=out, warn=say)


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
        if args.command == "setup":  # before the event loop: Ctrl-C at the prompt ends it now
            args.token_input = read_token(args.machine_id)
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
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # stdout's reader went away: main() ends quietly
        raise
    except Exception as exc:  # never a traceback (it could carry a header or a token)
        say(f"lane: unexpected error: {type(exc).__name__}: {exc}")
        return EXIT_FAIL


__all__ = ["dispatch", "main"]
