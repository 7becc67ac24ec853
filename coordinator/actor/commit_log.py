"""What a lane actor says about a durable group: its metrics and its log lines.

One `lane.ticket` line per ticket the group changed (its last write: lane, ticket, machine,
claim, state, fence, outcome, and `credential`: the name of the credential of the latest call
that wrote it, null when only the lane's own rules did: a grant, a reap), and one line per
pause, receipt and incident, each with the credential its row records
(docs/protocol.md#credentials). Logged after the COMMIT, so a line never tells of a change
that is not durable; a group's lines reach stderr in one write (`coordinator.logs.batched`),
and nothing is built below the `info` level."""

from __future__ import annotations

import logging
from typing import Protocol

import structlog

from coordinator.clock import Clock
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import Effects, PutIncident, PutPause, PutReceipt, PutTicket
from coordinator.logs import batched, enabled
from coordinator.metrics import LaneObserver

log = structlog.get_logger("coordinator.actor")


class Reporter(Protocol):
    """What a report reads of the lane's actor."""

    lane: str
    metrics: LaneObserver
    clock: Clock

    @property
    def core(self) -> LaneCore | None: ...


def report_group(actor: Reporter, fx: Effects, operations: int, seconds: float) -> None:
    """A group is durable: tell the metrics observer what was committed and how the lane
    stands now (a failure there is logged and never fails a reply), then log it."""
    try:
        actor.metrics.committed(actor.lane, fx, operations, seconds)
    except Exception as exc:
        log.error("lane.metrics_failed", lane=actor.lane, error=type(exc).__name__)
    log_group(actor.lane, fx)
    c = actor.core
    if c is None:
        return
    try:
        paused = c.paused(actor.clock.now())
        actor.metrics.lane_state(
            actor.lane, len(c.held), c.queued_count(), paused, len(c.in_flight)
        )
    except Exception as exc:
        log.error("lane.metrics_failed", lane=actor.lane, error=type(exc).__name__)


def log_group(lane: str, fx: Effects) -> None:
    """The group's log lines, in the order of its changes, written in one go."""
    if not enabled(logging.INFO):
        return
    with batched():
        _lines(lane, fx)


def _lines(lane: str, fx: Effects) -> None:
    changes = fx.changes
    last_put = {ch.ticket.ticket_id: i for i, ch in enumerate(changes) if type(ch) is PutTicket}
    # the credential of the latest call that wrote the ticket in the group (an acquire's
    # ticket is granted in the same step: the grant's own write has none)
    by = {
        ch.ticket.ticket_id: ch.by for ch in changes if type(ch) is PutTicket and ch.by is not None
    }
    for i, ch in enumerate(changes):
        if type(ch) is PutTicket:
            if last_put[ch.ticket.ticket_id] != i:
                continue
            t = ch.ticket
            log.info(
                "lane.ticket",
                lane=lane,
                ticket=t.ticket_id,
                machine=t.machine_id,
                claim=t.claim_id,
                state=t.state.value,
                fence=t.fence,
                outcome=t.outcome,
                credential=by.get(t.ticket_id),
            )
        elif isinstance(ch, PutPause):
            p = ch.pause
            log.info(
                "lane.pause",
                lane=lane,
                until=p.until if p else None,
                credential=p.credential if p else None,
            )
        elif isinstance(ch, PutReceipt):
            r = ch.receipt
            log.info(
                "lane.receipt",
                lane=lane,
                ticket=r.ticket_id,
                machine=r.machine_id,
                phase=r.phase,
                verified=r.content_hash_verified,
                credential=r.credential,
            )
        elif isinstance(ch, PutIncident):
            inc = ch.incident
            log.info(
                "lane.incident",
                lane=lane,
                kind=inc.kind,
                ticket=inc.ticket_id,
                machine=inc.machine_id,
                credential=inc.credential,
            )
