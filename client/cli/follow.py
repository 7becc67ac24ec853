"""The lane commands that stay and follow a ticket: `lane await` (long polls until the ticket
is held, progress on stderr) and `lane trace` (holds a ticket and logs every interval)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Awaitable
from typing import Any, TextIO, TypeVar

from client.api import LaneBackend
from client.cli.commands import with_backend
from client.cli.exits import EXIT_FAIL, EXIT_OK, UsageError
from client.cli.parser import TRACE_PROJECT, TRACE_PROMPT_HASH
from client.cli.render import emit_json, fmt_secs, fmt_time, lane_reply_text, out, say, who
from client.clock import monotonic, wall
from client.config import Settings
from client.errors import LaneClientError
from client.models import LaneReply

T = TypeVar("T")


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
        seen: LaneReply | None = None
        try:
            # A short first poll, so the position shows at once; then full long polls.
            r = seen = await b.await_ticket(lane, args.ticket, _step(1.0, deadline))
            progress.update(r)
            while r.ticket.state == "queued":
                if deadline is not None and deadline - monotonic() <= 0:
                    break
                r = seen = await b.await_ticket(lane, args.ticket, _step(args.wait, deadline))
                progress.update(r)
        except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancels us, then exits 130
            progress.clear()
            if seen is not None and seen.ticket.state == "queued":
                await _give_up(b, lane, args.ticket)
            raise
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


async def _give_up(b: LaneBackend, lane: str, ticket: str) -> None:
    """An interrupted await leaves no ticket queued: the wait is over for whoever asked, so
    it is released `abandoned` now rather than abandoned by the coordinator minutes later
    (a grant that raced the Ctrl-C is released too: nobody is left to use it)."""
    try:
        rel = await b.release(lane, ticket, "abandoned", None, "lane await interrupted")
    except LaneClientError as exc:
        say(f"lane: could not release {ticket}: {exc}")
        return
    if rel.released:
        say(f"lane: released {ticket} (abandoned): it no longer waits in the queue")


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

    def log(event: str, **fields: object) -> None:
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
            if r.ticket.state == "queued":
                waited = await _wait_queued(b, tid)
                if waited is None:
                    return code  # stopped while queued
                if not waited.granted:
                    say(f"lane: trace ticket {tid} is {waited.ticket.state}; stopping")
                    return EXIT_FAIL
                log("granted", ticket=tid, fence=waited.ticket.fence)
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
                if hb.state != "held":
                    say(f"lane: trace ticket {tid} is {hb.state}; stopping")
                    code = EXIT_FAIL
                    break
                await _until(stop, asyncio.sleep(args.interval))
        finally:
            rel = await b.release(lane, tid, "not-submitted", None, "lane trace")
            log("release", ticket=tid, released=rel.released, state=rel.state, reason=rel.reason)
        return code

    async def _wait_queued(b: LaneBackend, tid: str) -> LaneReply | None:
        """While queued: long polls (no heartbeats: a waiter has no lease to refresh), one
        `queued` line per answer; the reply that ended the wait, or None when stopped."""
        wait = max(1.0, min(args.interval, 60.0))  # docs/protocol.md#await: 1-60 s
        while not stop.is_set():
            w = await _until(stop, b.await_ticket(lane, tid, wait))
            if w is None:
                return None
            if w.ticket.state != "queued":
                return w
            log("queued", ticket=tid, position=w.ticket.position, eta=w.ticket.eta_seconds,
                pause=w.pause.reason_code if w.pause else None)  # fmt: skip
        return None

    return await with_backend(settings, run)


__all__ = ["cmd_await", "cmd_trace"]
