"""What `lane` prints: data on stdout (a readable table, or JSON with --json), messages on
stderr, and any secret it was given (the token) redacted from both."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

from client.clock import wall
from client.models import EtaError, HistoryReply, LaneReply, Pause, StatusReply, Ticket

_secrets: set[str] = set()  # values never to print (the token), redacted from any message


def keep_secret(value: str) -> None:
    """Never print `value` (a token): every later message shows `***` instead."""
    _secrets.add(value)


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


def eta_error_line(e: EtaError | None) -> str:
    """How far the lane's ETAs were off (docs/protocol.md#eta-error)."""
    if e is None:
        return "eta error  no grants yet"
    return (
        f"eta error  ±{fmt_secs(e.median_seconds)} median, p90 {fmt_secs(e.p90_seconds)} "
        f"(last {e.grants} grant{'s' if e.grants != 1 else ''})"
    )


def status_text(r: StatusReply, verbose: bool) -> str:
    lines = [
        f"lane {r.lane}  coordinator {r.coordinator}  enforced {'yes' if r.enforced else 'no'}  "
        f"capacity {r.capacity if r.capacity is not None else '-'}  held {len(r.held)}  "
        f"queued {r.queued_total if r.queued_total is not None else len(r.queued)}"
    ]
    if r.pause is not None:
        lines.append(pause_line(r.pause, r.now))
    if r.enforced:
        lines.append(eta_error_line(r.eta_error))
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


__all__ = [
    "emit_json",
    "fmt_secs",
    "fmt_time",
    "history_text",
    "keep_secret",
    "lane_reply_text",
    "out",
    "pause_line",
    "redact",
    "say",
    "status_text",
    "table",
    "ticket_rows",
    "who",
]
