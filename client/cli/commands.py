"""The one-shot lane commands — status, acquire, heartbeat, release, reconcile, receipt, cooldown,
history — and what every lane command shares: the lane from --lane or --route/--account,
the settings, the backend (the shared coordinator or the local queue)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

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
from client.models import (
    CooldownReply,
    HeartbeatReply,
    ReceiptReply,
    ReconcileReply,
    ReleaseReply,
)
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


class _Wire(Protocol):
    def to_wire(self) -> dict[str, Any]: ...


async def cmd_simple(args: argparse.Namespace, settings: Settings, lane: str) -> int:
    async def run(b: LaneBackend) -> int:
        cmd = args.command
        if cmd == "status":
            st = await b.status(lane, include_receipts=args.verbose)
            return _answer(args, st, lambda: status_text(st, args.verbose))
        if cmd == "acquire":
            r = await b.acquire(
                lane, args.project, args.scene, args.prompt_hash, args.lease_seconds
            )
            note = ""
            if r.duplicate and not r.granted and r.ticket.state == "held":
                note = (
                    f"lane: duplicate request — held by {who(r.owner.machine_id, r.owner.claim_id)}"
                )
            return _answer(args, r, lambda: lane_reply_text(r), note)
        if cmd == "heartbeat":
            h = await b.heartbeat(lane, args.ticket, args.lease_seconds)
            why = "" if h.refreshed else f"lane: heartbeat not refreshed: {h.reason}"
            return _answer(args, h, lambda: _heartbeat_text(h), why, ok=h.refreshed)
        if cmd == "release":
            rel = await b.release(lane, args.ticket, args.outcome, args.provider_job, args.note)
            why = "" if rel.released else f"lane: not released: {rel.reason}"
            return _answer(args, rel, lambda: _release_text(rel), why, ok=rel.released)
        if cmd == "reconcile":
            rc = await b.reconcile(lane, args.ticket, args.outcome, args.provider_job_id, args.note)
            return _answer(args, rc, lambda: _reconcile_text(rc))
        if cmd == "receipt":
            payload = read_payload(args.payload_file)
            # docs/protocol.md#driver-rules: hashes, ids and counts — never a prompt, a path,
            # a token, an account
            try:
                check_payload(payload, lane=lane)
            except ValueError as exc:
                raise UsageError(f"--payload-file: {exc}") from None
            rec = await b.receipt(lane, args.ticket, args.phase, payload, args.content_hash)
            note = ""
            if rec.coordinator != "actor-sqlite" and not rec.stored:
                note = "lane: the local queue keeps no receipts; nothing was stored"
            return _answer(args, rec, lambda: _receipt_text(rec), note)
        if cmd == "cooldown":
            retry = args.retry_after or settings.human_check_cooldown_seconds
            cd = await b.cooldown(lane, args.ticket, retry, args.reason)
            return _answer(args, cd, lambda: _cooldown_text(cd), _cooldown_note(cd))
        if cmd == "history":
            hist = await b.history(lane, args.limit, args.project)
            return _answer(args, hist, lambda: history_text(hist))
        raise UsageError(f"unknown command {cmd}")

    return await with_backend(settings, run)


def _answer(
    args: argparse.Namespace,
    reply: _Wire,
    text: Callable[[], str],
    note: str = "",
    *,
    ok: bool = True,
) -> int:
    """Print the reply (JSON with --json, else `text()`), then `note` (if any) on stderr; the
    exit code says whether the call did what it asked (`ok`)."""
    emit_json(reply.to_wire()) if args.json else out(text())
    if note:
        say(note)
    return EXIT_OK if ok else EXIT_FAIL


def _heartbeat_text(h: HeartbeatReply) -> str:
    if not h.refreshed:
        return f"refreshed  no\nstate      {h.state}\nreason     {h.reason}"
    left = fmt_secs(h.lease_expires_at - wall()) if h.lease_expires_at else "-"
    return f"refreshed  yes\nstate      {h.state}\nlease      {left} left\nfence      {h.fence}"


def _release_text(r: ReleaseReply) -> str:
    lines = [
        f"released   {'yes' if r.released else 'no'}",
        f"state      {r.state}",
        f"outcome    {r.outcome or 'null'}",
        f"promoted   {', '.join(r.promoted) or '-'}",
    ]
    if r.reason:
        lines.append(f"reason     {r.reason}")
    return "\n".join(lines)


def _reconcile_text(r: ReconcileReply) -> str:
    return (
        f"reconciled {'yes' if r.reconciled else 'no'}\npromoted   {', '.join(r.promoted) or '-'}"
    )


def _receipt_text(r: ReceiptReply) -> str:
    verified = {True: "yes", False: "NO (stored and flagged)", None: "unknown"}
    return (
        f"receipt    {r.receipt_id}\nstored     {'yes' if r.stored else 'no'}\n"
        f"replay     {'yes' if r.replay else 'no'}\n"
        f"hash       {r.content_hash} (verified: {verified[r.content_hash_verified]})"
    )


def _cooldown_text(r: CooldownReply) -> str:
    if r.pause is None:
        return "paused     no (unenforced lane)"
    return pause_line(r.pause, wall()) + ("  (extended)" if r.extended else "")


def _cooldown_note(r: CooldownReply) -> str:
    if not r.paused or r.pause is None:
        return ""
    where = "every computer" if r.coordinator == "actor-sqlite" else "this computer"
    return f"lane: paused {r.pause.reason_code} on {where} until {fmt_time(r.pause.until)}"


__all__ = [
    "cmd_simple",
    "load_cli_settings",
    "read_payload",
    "resolve_lane",
    "with_backend",
]
