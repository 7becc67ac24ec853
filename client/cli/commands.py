"""The one-shot lane commands — status, acquire, heartbeat, release, receipt, cooldown,
history — and what every lane command shares: the lane from --lane or --route/--account,
the settings, the backend (the shared coordinator or the local queue)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from client.api import LaneBackend
from client.cli.exits import EXIT_FAIL, EXIT_OK, UsageError
from client.cli.render import (
    emit_json,
    fmt_secs,
    fmt_time,
    history_text,
    keep_secret,
    lane_reply_text,
    out,
    pause_line,
    say,
    status_text,
    who,
)
from client.clock import wall
from client.config import ENV_ACCOUNT, Settings, connect, load_settings
from client.driver.payload_check import check_payload
from client.errors import PreProviderError
from client.models import CooldownReply, HeartbeatReply, ReceiptReply, ReleaseReply
from coordinator.protocol.errors import LaneError
from coordinator.protocol.names import parse_lane

T = TypeVar("T")


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
        keep_secret(s.token)
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
            # docs/protocol.md#driver-rules: hashes, ids and counts — never a prompt, a path,
            # a token, an account
            try:
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


__all__ = [
    "cmd_simple",
    "load_cli_settings",
    "read_payload",
    "resolve_lane",
    "with_backend",
]
