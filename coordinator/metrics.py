"""Prometheus metrics, fed by a small observer interface so the lane core stays pure.

The lane actor tells its observer what it committed (`committed`: the batch's changes,
how many operations it carried, how long the transaction took) and what the lane looks
like afterwards (`lane_state`). Everything about a lane is derived from the committed
changes, so a metric never counts something that was not durable. The HTTP layer adds
request durations and the receipt verdicts that commit nothing (replay, conflict).

Labels are bounded: `lane` (per-lane series exist for at most `metrics_max_lanes` lanes, the
most recently active; an evicted lane's label sets are removed, and the unlabelled
`lanes_all_*` gauges count every lane), `outcome`/`verdict` (closed sets), the
route's canonical path (never the raw path) and the method. Never a ticket, claim,
machine or token.

Each app owns one `Metrics` with its own `CollectorRegistry` (several apps in one
process, as in the tests, never share series). `NULL_METRICS` is the default observer.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from coordinator.config import DEFAULT_METRICS_MAX_LANES
from coordinator.engine.model import (
    RELEASE_OUTCOMES,
    Effects,
    Incident,
    IncidentKind,
    Outcome,
    PutIncident,
    PutReceipt,
    PutTicket,
    Ticket,
    TicketState,
)

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST  # text/plain; version=0.0.4; charset=utf-8

RECEIPT_VERDICTS: Final = ("verified", "mismatch", "replay", "conflict")
NO_OUTCOME: Final = "none"  # label of a release naming no outcome (docs/protocol.md#release)
UNMATCHED_ROUTE: Final = "unmatched"  # label of a request that matched no route
_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_HTTP_CHILDREN_CACHED: Final = 4096  # (route, method, code) children kept at most
_ENDED: Final = frozenset({TicketState.DONE, TicketState.EXPIRED})

# Buckets (seconds unless named otherwise).
WAIT_BUCKETS: Final = (0.1, 1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
HOLD_BUCKETS: Final = (1, 5, 15, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600)
HTTP_BUCKETS: Final = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
COMMIT_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
BATCH_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # operations per transaction


class LaneObserver(Protocol):
    """What a lane actor reports. Called on the event loop, after a successful commit."""

    def committed(self, lane: str, fx: Effects, operations: int, seconds: float) -> None: ...

    def lane_state(
        self, lane: str, held: int, queued: int, paused: bool, in_flight: int = 0
    ) -> None: ...

    def lane_open_failures(self, count: int) -> None: ...

    def lane_limit_refused(self) -> None: ...


class NullMetrics:
    """The default observer: records nothing."""

    def committed(self, lane: str, fx: Effects, operations: int, seconds: float) -> None:
        return None

    def lane_state(
        self, lane: str, held: int, queued: int, paused: bool, in_flight: int = 0
    ) -> None:
        return None

    def lane_open_failures(self, count: int) -> None:
        return None

    def lane_limit_refused(self) -> None:
        return None


NULL_METRICS: Final = NullMetrics()


class _Tally:
    """A histogram (child)'s observations, counted here and added to it when /metrics is
    read: an observation on the hot path is a bisect and two additions (prometheus_client's
    own observe takes two locks and walks the buckets). Loop thread only."""

    __slots__ = ("_bounds", "_child", "_counts", "_n", "_sum")

    def __init__(self, child: Histogram) -> None:
        self._child = child
        bounds = getattr(child, "_upper_bounds", None)
        ok = bounds is not None and hasattr(child, "_buckets") and hasattr(child, "_sum")
        self._bounds: list[float] | None = list(bounds) if ok and bounds is not None else None
        self._counts = [0] * len(self._bounds or ())
        self._sum = 0.0
        self._n = 0

    def observe(self, amount: float) -> None:
        if self._bounds is None or amount != amount:  # unknown internals, NaN: as it would
            self._child.observe(amount)
            return
        self._counts[bisect.bisect_left(self._bounds, amount)] += 1
        self._sum += amount
        self._n += 1

    def flush(self) -> None:
        """Add what was counted to the histogram (before it is read)."""
        if not self._n:
            return
        buckets = self._child._buckets
        for i, n in enumerate(self._counts):
            if n:
                buckets[i].inc(n)
                self._counts[i] = 0
        self._child._sum.inc(self._sum)
        self._sum, self._n = 0.0, 0


@dataclass(slots=True)
class _LaneSeries:
    """One lane's labelled children, looked up once (labels() takes a lock each call)."""

    holders: Gauge
    queue_depth: Gauge
    paused: Gauge
    in_flight: Gauge
    wait: _Tally
    hold: _Tally
    state: tuple[int, int, bool, int] | None = None

    def observe_hold(self, t: Ticket) -> None:
        if t.held_at is not None and t.ended_at is not None:
            self.hold.observe(max(0.0, t.ended_at - t.held_at))


class Metrics:
    """The coordinator's Prometheus metrics, in a registry of their own."""

    def __init__(self, max_lanes: int = DEFAULT_METRICS_MAX_LANES) -> None:
        self.max_lanes = max_lanes  # lanes with per-lane series at most
        r = self.registry = CollectorRegistry()
        self.grants = Counter("lanes_grants", "Tickets granted (queued -> held)", registry=r)
        self.releases = Counter(
            "lanes_releases",
            "Tickets ended by a release call, by the outcome the driver reported",
            ["outcome"],
            registry=r,
        )
        self.expiries = Counter(
            "lanes_expiries", "Held leases reaped by the alarm (not heartbeated)", registry=r
        )
        self.abandoned = Counter(
            "lanes_abandoned", "Queued tickets ended by the alarm (waiter went silent)", registry=r
        )
        self.cooldowns = Counter(
            "lanes_cooldowns", "Lane pauses started by a provider cooldown report", registry=r
        )
        self.receipts = Counter(
            "lanes_receipts", "Receipt writes by verdict", ["verdict"], registry=r
        )
        self.queue_depth = Gauge("lanes_queue_depth", "Queued tickets", ["lane"], registry=r)
        self.holders = Gauge("lanes_holders", "Held tickets", ["lane"], registry=r)
        self.paused = Gauge("lanes_paused", "1 while the lane is paused", ["lane"], registry=r)
        self.in_flight = Gauge(
            "lanes_in_flight",
            "In-flight provider jobs holding a slot after their ticket ended",
            ["lane"],
            registry=r,
        )
        self.all_in_flight = Gauge(
            "lanes_all_in_flight", "In-flight provider jobs holding a slot, all lanes", registry=r
        )
        self.open_failures = Gauge(
            "lanes_open_failures",
            "Lane files that cannot be opened or read (the lane.open_failed log names them)",
            registry=r,
        )
        self.all_holders = Gauge("lanes_all_holders", "Held tickets, all lanes", registry=r)
        self.all_queue_depth = Gauge(
            "lanes_all_queue_depth", "Queued tickets, all lanes", registry=r
        )
        self.all_paused = Gauge("lanes_all_paused", "Lanes paused now", registry=r)
        self.limit_refusals = Counter(
            "lanes_lane_limit_refusals",
            "Acquires refused because max_lanes lanes exist (a new lane was not made)",
            registry=r,
        )
        self.wait = Histogram(
            "lanes_wait_seconds",
            "Enqueue to grant, per granted ticket",
            ["lane"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.hold = Histogram(
            "lanes_hold_seconds",
            "Grant to release or expiry, per ended lease",
            ["lane"],
            buckets=HOLD_BUCKETS,
            registry=r,
        )
        self.http = Histogram(
            "lanes_http_request_duration_seconds",
            "HTTP request duration by canonical route, method and status code",
            ["route", "method", "code"],
            buckets=HTTP_BUCKETS,
            registry=r,
        )
        self.commit_batch = Histogram(
            "lanes_commit_batch_size",
            "Operations acknowledged by one lane transaction (group commit)",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.commit_seconds = Histogram(
            "lanes_commit_seconds",
            "Duration of one lane transaction, fsync included",
            buckets=COMMIT_BUCKETS,
            registry=r,
        )
        self._lanes: OrderedDict[str, _LaneSeries] = OrderedDict()  # least recent first
        self._states: dict[str, tuple[int, int, bool, int]] = {}  # every lane's, for the totals
        # Closed label sets start at zero, so a rate() over them is defined from the start.
        # Their children are looked up once (labels() takes a lock and builds a key).
        self._outcomes = {
            o: self.releases.labels(outcome=o) for o in (*RELEASE_OUTCOMES, NO_OUTCOME)
        }
        self._verdicts = {v: self.receipts.labels(verdict=v) for v in RECEIPT_VERDICTS}
        self._http_children: dict[tuple[str, str, int], _Tally] = {}
        self._commit_batch = _Tally(self.commit_batch)
        self._commit_seconds = _Tally(self.commit_seconds)

    # ---------------------------------------------------------------- LaneObserver

    def committed(self, lane: str, fx: Effects, operations: int, seconds: float) -> None:
        self._commit_batch.observe(operations)
        self._commit_seconds.observe(seconds)
        # A batch may write one ticket several times; the objects are the live records,
        # so the last write is the ticket's state at commit.
        tickets: dict[str, Ticket] = {}
        incidents: list[Incident] | None = None
        for ch in fx.changes:
            if isinstance(ch, PutTicket):
                tickets[ch.ticket.ticket_id] = ch.ticket
            elif isinstance(ch, PutIncident):
                if incidents is None:
                    incidents = []
                incidents.append(ch.incident)
            elif isinstance(ch, PutReceipt):
                verified = ch.receipt.content_hash_verified
                self._verdicts["verified" if verified else "mismatch"].inc()
        expired: set[str] = set()
        abandoned: set[str] = set()
        late: set[str] = set()
        if incidents is not None:
            for inc in incidents:
                if inc.kind == IncidentKind.LEASE_EXPIRED:
                    expired.add(inc.ticket_id or "")
                elif inc.kind == IncidentKind.WAITER_ABANDONED:
                    abandoned.add(inc.ticket_id or "")
                elif inc.kind == IncidentKind.LATE_RELEASE:
                    late.add(inc.ticket_id or "")
                elif inc.kind == IncidentKind.COOLDOWN_STARTED:
                    self.cooldowns.inc()
        series = self._series(lane)
        if fx.promoted:
            self.grants.inc(len(fx.promoted))
            for tid in fx.promoted:
                t = tickets.get(tid)
                if t is not None and t.held_at is not None:
                    series.wait.observe(max(0.0, t.held_at - t.enqueued_at))
        if expired:
            self.expiries.inc(len(expired))
        if abandoned:
            self.abandoned.inc(len(abandoned))
        for tid, t in tickets.items():
            if t.state not in _ENDED:
                continue
            if tid in late and tid not in expired:
                continue  # a late release of a lease already counted as expired
            if t.outcome == Outcome.EXPIRED:
                series.observe_hold(t)
            elif tid not in abandoned and t.state is TicketState.DONE:
                outcome = t.outcome or NO_OUTCOME
                child = self._outcomes.get(outcome)
                if child is None:
                    child = self._outcomes[outcome] = self.releases.labels(outcome=outcome)
                child.inc()
                series.observe_hold(t)

    def lane_state(
        self, lane: str, held: int, queued: int, paused: bool, in_flight: int = 0
    ) -> None:
        series = self._series(lane)
        state = (held, queued, paused, in_flight)
        old = self._states.get(lane)
        if old != state:
            self._states[lane] = state
            o_held, o_queued, o_paused, o_in_flight = old or (0, 0, False, 0)
            self.all_holders.inc(held - o_held)
            self.all_queue_depth.inc(queued - o_queued)
            self.all_paused.inc(int(paused) - int(o_paused))
            self.all_in_flight.inc(in_flight - o_in_flight)
        if series.state != state:  # called after every flush: skip the unchanged
            series.state = state
            series.holders.set(held)
            series.queue_depth.set(queued)
            series.paused.set(1 if paused else 0)
            series.in_flight.set(in_flight)

    def lane_open_failures(self, count: int) -> None:
        self.open_failures.set(count)

    def lane_limit_refused(self) -> None:
        self.limit_refusals.inc()

    def _series(self, lane: str) -> _LaneSeries:
        series = self._lanes.get(lane)
        if series is not None:
            self._lanes.move_to_end(lane)
        else:
            while len(self._lanes) >= self.max_lanes:  # evict the least recently active
                old, _ = self._lanes.popitem(last=False)
                for metric in (
                    self.holders,
                    self.queue_depth,
                    self.paused,
                    self.in_flight,
                    self.wait,
                    self.hold,
                ):
                    metric.remove(old)
            series = self._lanes[lane] = _LaneSeries(
                holders=self.holders.labels(lane=lane),
                queue_depth=self.queue_depth.labels(lane=lane),
                paused=self.paused.labels(lane=lane),
                in_flight=self.in_flight.labels(lane=lane),
                wait=_Tally(self.wait.labels(lane=lane)),
                hold=_Tally(self.hold.labels(lane=lane)),
            )
        return series

    # ---------------------------------------------------------------- HTTP layer

    def receipt_verdict(self, verdict: str) -> None:
        """Verdicts that commit nothing: `replay` (same hash again), `conflict` (409)."""
        self.receipts.labels(verdict=verdict).inc()

    def http_request(self, route: str | None, method: str, code: int, seconds: float) -> None:
        key = (route or UNMATCHED_ROUTE, method if method in _METHODS else "other", code)
        tally = self._http_children.get(key)
        if tally is None:  # bounded: routes x methods x the codes the app answers
            child = self.http.labels(route=key[0], method=key[1], code=str(code))
            if len(self._http_children) >= _HTTP_CHILDREN_CACHED:
                child.observe(seconds)
                return
            tally = self._http_children[key] = _Tally(child)
        tally.observe(seconds)

    def render(self) -> bytes:
        for tally in (self._commit_batch, self._commit_seconds, *self._http_children.values()):
            tally.flush()
        for series in self._lanes.values():
            series.wait.flush()
            series.hold.flush()
        return generate_latest(self.registry)
