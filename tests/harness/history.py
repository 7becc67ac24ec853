"""A recorded-history checker for fault tests: what clients sent and were told, checked
afterwards against what the coordinator has on record.

Store-agnostic: it speaks only the wire protocol (docs/protocol.md), so it serves the
PostgreSQL replica failover tests and a kill -9 campaign against one SQLite server alike.

Recording. One `Ledger` per test. Every HTTP attempt is one `Entry`: `ledger.sent(client, op,
lane, body, target=url, credential=name)` before the request goes out, then exactly one of
`ledger.replied(entry, status, body)` (any HTTP answer) or `ledger.failed(entry, error)` (no
answer: refused, reset, timed out). An entry is *acknowledged* when its status is 2xx: only
then did the client learn something the server must stand by. A retry is a new entry.
Times (`sent_at`, `replied_at`, `ledger.mark(name)`) come from the ledger's clock, one
monotonic clock for the whole test; the server's times (heldAt, endedAt, leaseExpiresAt) come
from the replies and the views and are never mixed with it.

Server views. After the run, `LaneView.from_replies(status, history)` per lane, from
POST /v1/lanes/status and /v1/lanes/history read through a surviving server
(`read_views(url, token, lanes)` does the reads). A view is `complete` when the history
read holds every retained row and no queued ticket was cut from the status reply.

`check(ledger, views)` returns a `Report`. The rules, per enforced lane:

(a) Acknowledged tickets exist. Every ticket named by an acknowledged reply (the ticket of an
    acquire; the ticket of an await, heartbeat or release) is on the server: live in the
    status or ended in the history. Otherwise the ack is *lost*. A reply that showed the
    ticket held (acquire/await `ticket.state == "held"`, heartbeat `refreshed: true`) is an
    acknowledged grant: the server's record must have been held (heldAt not null), else
    lost; its fence and heldAt must be the ones the reply gave (a different one is a
    violation: the grant was rewritten).
(b) Acknowledged releases are reflected. `released: true` (the release was applied while
    the ticket was live): the ticket is ended in the history with exactly the outcome sent.
    `reason: "expired"` (the lease had already been reaped when the release arrived): the
    history row reads outcome `expired` and, when an outcome was sent, `lateOutcome` equals
    it. `reason: "already-done"` (a retry of a release whose first reply was lost, or a
    release after the end): the ticket is ended in the history, whatever its outcome.
    `reason: "not-owner"` claims no effect and is not checked. Anything else is lost.
    An acknowledged heartbeat `refreshed: true` with `leaseExpiresAt = L`: when the server
    says the lease was reaped (outcome `expired`), it was reaped no earlier than L
    (a reap ends at the lease's expiry), else the refresh was lost.
(c) Fences. Every fence seen (server rows, held tickets, acknowledged replies): one fence
    per ticket, one ticket per fence; ordered by fence, the grants' heldAt never decrease
    (fences strictly increase with grant time); on a complete view the lane's fences are
    exactly 1..N (a gap is a grant that was issued and is on record nowhere).
(d) Capacity. Each ticket ever held is an interval of server time: from heldAt (the server's
    row, else the acknowledged reply) to endedAt (the server's row; still held: open; not on
    the server: the latest leaseExpiresAt any acknowledged reply gave it). At every instant
    at most `capacity` intervals overlap (an end and a start at the same instant do not
    overlap: a release promotes in the same step). Real time too: a ticket whose release
    was acknowledged `released: true` was certainly held from the arrival of its first
    acknowledged grant to the sending of that release; on the ledger's clock those spans
    never overlap more than `capacity` at once.
(f) Credentials (tests/harness/history_credentials.py): the ticket of an acknowledged acquire
    that made it names that attempt's credential; a `released: true` release's row names the
    releaser's credential in `releasedBy` (attempts recorded without a credential: unchecked).
(e) No revival. Once an acknowledged reply showed a ticket ended (done/expired), no reply to
    an operation sent after that reply arrived shows it queued or held, and the server does
    not list it live. Likewise once shown held, it is never shown queued again.

(f) In-flight holds (tests/harness/in_flight.py, with receipts recorded): the acknowledged
    receipts of each ticket whose receipts were read are on the server; a ticket that ended
    expired / lease-lost / timeout after its provider-submitted receipt and before any
    provider-terminal one holds its slot exactly until submittedAt + the lane's hold
    (`LaneView.hold_seconds`, when the test gives it), its hold ends at its provider-terminal
    receipt or at holdUntil, and a waiter is never granted while held + in-flight jobs fill
    the lane.

`Report` counts the attempts sent, acknowledged and unacknowledged, the lost acks (with
`lost_details`) and lists every violation as a sentence; `report.summary(name)` is the
one-line summary a test prints.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.harness.history_credentials import check_credentials
from tests.harness.in_flight import candidates, check_in_flight, receipt_rows

ENDED_STATES = frozenset({"done", "expired"})
LIVE_STATES = frozenset({"queued", "held"})
TICKET_OPS = frozenset({"acquire", "await", "heartbeat", "release"})
EPSILON = 1e-6  # seconds: server times compared after a JSON (and database) round trip
HISTORY_LIMIT = 5000  # the largest history read the protocol allows


# ---------------------------------------------------------------- the ledger


@dataclass
class Entry:
    """One attempt: what was sent, and what came back (if anything)."""

    seq: int
    client: str
    op: str
    lane: str
    body: dict[str, Any]
    sent_at: float
    target: str = ""
    credential: str | None = None  # the name of the credential it presented (None: unknown)
    replied_at: float | None = None
    status: int | None = None
    reply: dict[str, Any] | None = None
    error: str | None = None

    @property
    def acknowledged(self) -> bool:
        return self.status is not None and 200 <= self.status < 300 and self.reply is not None

    @property
    def ticket_id(self) -> str | None:
        """The ticket this attempt is about: the request's, else the acquire reply's."""
        tid = self.body.get("ticketId")
        if isinstance(tid, str):
            return tid
        if self.reply is not None and isinstance(self.reply.get("ticket"), dict):
            got = self.reply["ticket"].get("ticketId")
            return got if isinstance(got, str) else None
        return None

    @property
    def machine(self) -> str | None:
        m = self.body.get("machineId")
        return m if isinstance(m, str) else None

    def describe(self) -> str:
        where = f" via {self.target}" if self.target else ""
        return f"#{self.seq} {self.op} by {self.client}{where} (sent at {self.sent_at:.3f})"


class Ledger:
    """Every attempt of a test, in the order they were sent (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.entries: list[Entry] = []
        self.marks: dict[str, float] = {}
        self._seq = itertools.count(1)
        self._mutex = threading.Lock()

    def sent(
        self,
        client: str,
        op: str,
        lane: str,
        body: Mapping[str, Any],
        *,
        target: str = "",
        at: float | None = None,
        credential: str | None = None,
    ) -> Entry:
        with self._mutex:
            entry = Entry(
                next(self._seq),
                client,
                op,
                lane,
                dict(body),
                self.clock() if at is None else at,
                target,
                credential,
            )
            self.entries.append(entry)
        return entry

    def replied(self, entry: Entry, status: int, reply: Any, *, at: float | None = None) -> Entry:
        """An HTTP answer (any status); a body that is not a JSON object is kept as None."""
        entry.replied_at = self.clock() if at is None else at
        entry.status = status
        entry.reply = reply if isinstance(reply, dict) else None
        if not isinstance(reply, dict):
            entry.error = f"HTTP {status}: not a JSON object"
        return entry

    def failed(self, entry: Entry, error: str, *, at: float | None = None) -> Entry:
        """No answer at all (connection refused or reset, timeout)."""
        entry.replied_at = self.clock() if at is None else at
        entry.error = error
        return entry

    def mark(self, name: str, at: float | None = None) -> float:
        """A named moment of the test on the ledger's clock (`kill`, `pg-down`, ...)."""
        t = self.clock() if at is None else at
        self.marks[name] = t
        return t

    # ---------------------------------------------------------------- questions

    def snapshot(self) -> list[Entry]:
        with self._mutex:
            return list(self.entries)

    @property
    def lanes(self) -> set[str]:
        return {e.lane for e in self.snapshot()}

    def acknowledged(self) -> list[Entry]:
        return [e for e in self.snapshot() if e.acknowledged]

    def acknowledged_after(self, t: float) -> int:
        """Acknowledged attempts sent after `t` (ledger clock)."""
        return sum(1 for e in self.snapshot() if e.acknowledged and e.sent_at > t)

    def unavailable_between(self, start: float, end: float) -> int:
        """Attempts sent in [start, end] answered 503 or not answered at all."""
        return sum(
            1
            for e in self.snapshot()
            if start <= e.sent_at <= end and (e.status == 503 or (e.status is None and e.error))
        )


# ---------------------------------------------------------------- the server's views


@dataclass
class LaneView:
    """One lane as the server has it on record, read after the run."""

    lane: str
    enforced: bool
    capacity: int | None
    now: float
    held: list[dict[str, Any]]
    queued: list[dict[str, Any]]
    history: list[dict[str, Any]]
    complete: bool = True
    in_flight: list[dict[str, Any]] = field(default_factory=list)  # status inFlight
    # ticket -> its receipts on the server (rule (f)); a ticket not read is not a key
    receipts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    hold_seconds: float | None = None  # the lane's in_flight_hold_seconds, when known

    @classmethod
    def from_replies(
        cls,
        status: Mapping[str, Any],
        history: Mapping[str, Any],
        receipts: Mapping[str, list[dict[str, Any]]] | None = None,
        hold_seconds: float | None = None,
    ) -> LaneView:
        entries = list(history.get("entries", []))
        queued = list(status.get("queued", []))
        retained = history.get("retained")
        complete = (retained is None or int(retained) <= len(entries)) and int(
            status.get("queuedTotal", len(queued))
        ) <= len(queued)
        cap = status.get("capacity")
        return cls(
            lane=str(status["lane"]),
            enforced=bool(status.get("enforced", True)),
            capacity=int(cap) if cap is not None else None,
            now=float(status.get("now", math.inf)),
            held=list(status.get("held", [])),
            queued=queued,
            history=entries,
            complete=complete,
            in_flight=list(status.get("inFlight", []) or []),
            receipts=dict(receipts or {}),
            hold_seconds=hold_seconds,
        )


async def read_views(
    url: str,
    token: str,
    lanes: Iterable[str],
    *,
    timeout: float = 30.0,
    hold_seconds: float | None = None,
    receipts_of: Iterable[tuple[str, str]] = (),
) -> dict[str, LaneView]:
    """Status and the whole history of every lane, read through the server at `url`, and the
    receipts (GET /v1/evidence) of every ticket that may have left an in-flight job and of
    each (lane, ticket) in `receipts_of`; `hold_seconds`: the lanes' in_flight_hold_seconds."""
    import aiohttp  # the checker itself needs no HTTP client

    views: dict[str, LaneView] = {}
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(
        headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)
    ) as session:
        for lane in sorted(set(lanes)):
            got: dict[str, dict[str, Any]] = {}
            for op, extra in (("status", {}), ("history", {"limit": HISTORY_LIMIT})):
                body = {"protocolVersion": 1, "lane": lane, **extra}
                async with session.post(f"{url}/v1/lanes/{op}", json=body) as resp:
                    data = await resp.json()
                    if resp.status != 200 or not isinstance(data, dict):
                        raise AssertionError(f"{op} of {lane} via {url}: {resp.status} {data}")
                    got[op] = data
            wanted = candidates(got["status"], got["history"])
            wanted |= {tid for ln, tid in receipts_of if ln == lane}
            receipts: dict[str, list[dict[str, Any]]] = {}
            for tid in sorted(wanted):
                params = {"lane": lane, "ticketId": tid}
                async with session.get(f"{url}/v1/evidence", params=params) as resp:
                    data = await resp.json()
                    if resp.status != 200 or not isinstance(data, dict):
                        raise AssertionError(f"evidence of {tid} via {url}: {resp.status} {data}")
                    receipts[tid] = receipt_rows(data)
            views[lane] = LaneView.from_replies(
                got["status"], got["history"], receipts, hold_seconds
            )
    return views


# ---------------------------------------------------------------- the report


@dataclass
class Report:
    sent: int = 0
    acknowledged: int = 0
    unacknowledged: int = 0  # answered otherwise (503, 4xx) or not at all
    lost: int = 0  # acknowledged attempts whose effect the server does not have
    lost_details: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    lanes: int = 0
    tickets: int = 0  # distinct tickets named by acknowledged replies
    grants: int = 0  # distinct fences seen in all
    max_holders: dict[str, int] = field(default_factory=dict)  # lane -> max overlap seen
    in_flight: int = 0  # in-flight holds on record (rule (f))

    @property
    def ok(self) -> bool:
        return self.lost == 0 and not self.violations

    def summary(self, name: str) -> str:
        return (
            f"{name}: ops sent {self.sent}, acknowledged {self.acknowledged}, "
            f"unacknowledged {self.unacknowledged}, lost {self.lost}, "
            f"violations {len(self.violations)} (lanes {self.lanes}, tickets {self.tickets}, "
            f"grants {self.grants}, in-flight holds {self.in_flight}, max holders "
            f"{self.max_holders})"
        )

    def explain(self, limit: int = 30) -> str:
        lines = [*self.lost_details, *self.violations]
        more = f"\n... and {len(lines) - limit} more" if len(lines) > limit else ""
        return "\n".join(lines[:limit]) + more


# ---------------------------------------------------------------- the check


@dataclass
class _Record:
    """One ticket as the server has it."""

    ticket_id: str
    live: bool
    state: str  # queued | held | ended
    held_at: float | None
    ended_at: float | None
    fence: int | None
    outcome: str | None
    late_outcome: str | None


@dataclass
class _Seen:
    """One acknowledged observation of a ticket."""

    entry: Entry
    state: str | None  # queued | held | done | expired | None (no claim about the state)
    fence: int | None = None
    held_at: float | None = None
    lease_expires_at: float | None = None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _observe(e: Entry) -> _Seen | None:
    """What an acknowledged reply says about its ticket's state."""
    r = e.reply
    assert r is not None
    if e.op in ("acquire", "await"):
        t = r.get("ticket")
        if not isinstance(t, dict):
            return None
        return _Seen(
            e,
            t.get("state") if isinstance(t.get("state"), str) else None,
            _int(t.get("fence")),
            _num(t.get("heldAt")),
            _num(t.get("leaseExpiresAt")),
        )
    if e.op == "heartbeat":
        if r.get("reason") == "not-owner":
            return _Seen(e, None)
        state = r.get("state") if isinstance(r.get("state"), str) else None
        if r.get("refreshed") is True:
            state = "held"
        return _Seen(e, state, _int(r.get("fence")), None, _num(r.get("leaseExpiresAt")))
    if e.op == "release":
        if r.get("reason") == "not-owner":
            return _Seen(e, None)
        return _Seen(e, r.get("state") if isinstance(r.get("state"), str) else None)
    return None


def _records(view: LaneView, violations: list[str]) -> dict[str, _Record]:
    out: dict[str, _Record] = {}
    for rows, kind in ((view.held, "held"), (view.queued, "queued"), (view.history, "ended")):
        live = kind != "ended"
        for row in rows:
            tid = str(row["ticketId"])
            rec = _Record(
                tid,
                live,
                kind,
                _num(row.get("heldAt")),
                None if live else _num(row.get("endedAt")),
                _int(row.get("fence")),
                None if live else row.get("outcome"),
                None if live else row.get("lateOutcome"),
            )
            if tid in out:
                violations.append(
                    f"{view.lane}: server lists ticket {tid} twice "
                    f"({out[tid].state} and {rec.state})"
                )
                continue
            out[tid] = rec
    for rows, kind in ((view.held, "held"), (view.queued, "queued")):
        for row in rows:
            if row.get("state", kind) != kind:
                violations.append(f"{view.lane}: a {kind} ticket of the status reads {row}")
    for row in view.held:
        if _int(row.get("fence")) is None or _num(row.get("heldAt")) is None:
            violations.append(f"{view.lane}: held ticket {row['ticketId']} has no grant: {row}")
    return out


def check(ledger: Ledger, views: Mapping[str, LaneView] | Iterable[LaneView]) -> Report:
    """Check the ledger against the server's views (see the module docstring)."""
    by_lane = dict(views) if isinstance(views, Mapping) else {v.lane: v for v in views}
    entries = ledger.snapshot()
    acked = [e for e in entries if e.acknowledged]
    report = Report(
        sent=len(entries),
        acknowledged=len(acked),
        unacknowledged=len(entries) - len(acked),
    )
    lanes = sorted({e.lane for e in acked} | set(by_lane))
    report.lanes = len(lanes)
    for lane in lanes:
        view = by_lane.get(lane)
        if view is None:
            report.violations.append(f"{lane}: no server view of this lane to check against")
            continue
        if not view.enforced:
            continue  # nothing is stored for an unenforced lane
        _check_lane(view, [e for e in acked if e.lane == lane], report)
    report.lost = len(report.lost_details)
    return report


def _check_lane(view: LaneView, acked: list[Entry], report: Report) -> None:
    lane = view.lane
    lost, bad = report.lost_details, report.violations
    records = _records(view, bad)
    seen: dict[str, list[_Seen]] = defaultdict(list)
    for e in acked:
        tid = e.ticket_id
        if e.op not in TICKET_OPS or tid is None:
            continue
        obs = _observe(e)
        if obs is not None:
            seen[tid].append(obs)
    report.tickets += len(seen)

    # (a) every acknowledged ticket is on record; every acknowledged grant as it was told
    for tid, observations in seen.items():
        rec = records.get(tid)
        if rec is None:
            first = min(observations, key=lambda s: s.entry.seq).entry
            lost.append(
                f"{lane}: ticket {tid} is not on the server, though acknowledged "
                f"{len(observations)} time(s), first by {first.describe()}"
            )
            continue
        for s in observations:
            if s.state != "held":
                continue
            if rec.held_at is None:
                lost.append(
                    f"{lane}: {s.entry.describe()} was told {tid} is held (fence {s.fence}), "
                    f"but the server has it never held ({rec.state}, outcome {rec.outcome})"
                )
                break
            if s.fence is not None and rec.fence != s.fence:
                bad.append(
                    f"{lane}: {s.entry.describe()} was told {tid} holds fence {s.fence}, "
                    f"the server says {rec.fence}"
                )
            if s.held_at is not None and abs(s.held_at - rec.held_at) > EPSILON:
                bad.append(
                    f"{lane}: {s.entry.describe()} was told {tid} was granted at "
                    f"{s.held_at}, the server says {rec.held_at}"
                )

    # (b) acknowledged releases and lease refreshes are reflected
    for tid, observations in seen.items():
        rec = records.get(tid)
        if rec is None:
            continue  # already lost under (a)
        for s in observations:
            e = s.entry
            assert e.reply is not None
            if e.op == "release":
                problem = _release_problem(e, rec)
                if problem:
                    lost.append(f"{lane}: acknowledged {e.describe()} of {tid}: {problem}")
            elif e.op == "heartbeat" and e.reply.get("refreshed") is True:
                until = s.lease_expires_at
                if (
                    until is not None
                    and rec.state == "ended"
                    and rec.outcome == "expired"
                    and rec.ended_at is not None
                    and rec.ended_at < until - EPSILON
                ):
                    lost.append(
                        f"{lane}: acknowledged {e.describe()} extended {tid}'s lease to "
                        f"{until}, but the server reaped it at {rec.ended_at}"
                    )

    _check_fences(view, records, seen, report)
    _check_capacity(view, records, seen, report)
    _check_revivals(view, records, seen, report)
    check_in_flight(view, acked, report)
    check_credentials(view, acked, report.violations)


def _release_problem(e: Entry, rec: _Record) -> str | None:
    assert e.reply is not None
    sent = e.body.get("outcome")
    reason = e.reply.get("reason")
    if reason == "not-owner":
        return None
    if rec.state != "ended":
        return f"the server still has the ticket {rec.state}"
    if e.reply.get("released") is True:
        if rec.outcome != sent:
            return f"released with outcome {sent!r}, the server's row reads {rec.outcome!r}"
        return None
    if reason == "expired":
        if rec.outcome != "expired":
            return f"told the lease had expired, the server's row reads {rec.outcome!r}"
        if sent is not None and rec.late_outcome != sent:
            return (
                f"late release with outcome {sent!r}, the server's row keeps lateOutcome "
                f"{rec.late_outcome!r}"
            )
        return None
    if reason == "already-done":
        return None
    return f"reply not understood: {e.reply}"


def _check_fences(
    view: LaneView, records: dict[str, _Record], seen: dict[str, list[_Seen]], report: Report
) -> None:
    """(c) one fence per ticket, one ticket per fence, fences in grant order, no gap."""
    lane, bad = view.lane, report.violations
    fences: dict[str, set[int]] = defaultdict(set)
    for tid, rec in records.items():
        if rec.fence is not None:
            fences[tid].add(rec.fence)
        if rec.held_at is not None and rec.fence is None:
            bad.append(f"{lane}: ticket {tid} was held (at {rec.held_at}) without a fence")
    for tid, observations in seen.items():
        for s in observations:
            if s.fence is not None:
                fences[tid].add(s.fence)
    owners: dict[int, set[str]] = defaultdict(set)
    for tid, fs in fences.items():
        if len(fs) > 1:
            bad.append(f"{lane}: ticket {tid} was seen with fences {sorted(fs)}")
        for f in fs:
            owners[f].add(tid)
    for f, tids in sorted(owners.items()):
        if len(tids) > 1:
            bad.append(f"{lane}: duplicate fence {f} given to tickets {sorted(tids)}")
    report.grants += len(owners)
    grants = sorted(
        (rec.fence, rec.held_at, tid)
        for tid, rec in records.items()
        if rec.fence is not None and rec.held_at is not None
    )
    for (f1, h1, t1), (f2, h2, t2) in itertools.pairwise(grants):
        if h2 < h1 - EPSILON:
            bad.append(
                f"{lane}: fence {f2} ({t2}) was granted at {h2}, before fence {f1} ({t1}) "
                f"at {h1}: fences do not increase with grant time"
            )
    if view.complete and owners:
        missing = sorted(set(range(1, max(owners) + 1)) - set(owners))
        if missing:
            bad.append(
                f"{lane}: fences {missing[:10]} were issued (the lane is at fence "
                f"{max(owners)}) but no ticket on record or acknowledged holds them"
            )


def _check_capacity(
    view: LaneView, records: dict[str, _Record], seen: dict[str, list[_Seen]], report: Report
) -> None:
    """(d) at most `capacity` holders at every instant: server time, then real time."""
    lane, bad = view.lane, report.violations
    cap = view.capacity
    intervals: dict[str, tuple[float, float]] = {}
    for tid in set(records) | set(seen):
        rec = records.get(tid)
        held = [s for s in seen.get(tid, []) if s.state == "held"]
        start = rec.held_at if rec is not None else None
        if start is None:
            starts = [s.held_at for s in held if s.held_at is not None]
            start = min(starts) if starts else None
        if start is None:
            continue  # never held, by every account
        if rec is not None and rec.state == "ended" and rec.ended_at is not None:
            end = rec.ended_at
        elif rec is not None and rec.state == "held":
            end = math.inf
        else:  # acknowledged held, not held on the server: until its last lease told
            leases = [s.lease_expires_at for s in held if s.lease_expires_at is not None]
            end = max(leases) if leases else math.inf
        if end < start - EPSILON:
            bad.append(f"{lane}: ticket {tid} ended at {end}, before its grant at {start}")
        intervals[tid] = (start, end)
    worst = _max_overlap(intervals)
    report.max_holders[lane] = max(report.max_holders.get(lane, 0), worst[0])
    if cap is not None and worst[0] > cap:
        bad.append(
            f"{lane}: {worst[0]} holders at server time {worst[1]} (capacity {cap}): "
            f"{sorted(worst[2])}"
        )
    # Real time: a ticket released with `released: true` was held from the arrival of its
    # first acknowledged grant to the sending of that release.
    spans: dict[str, tuple[float, float]] = {}
    for tid, observations in seen.items():
        grants = [s.entry.replied_at for s in observations if s.state == "held"]
        releases = [
            s.entry.sent_at
            for s in observations
            if s.entry.op == "release"
            and s.entry.reply is not None
            and s.entry.reply.get("released") is True
        ]
        got = [g for g in grants if g is not None]
        if got and releases and min(got) < min(releases):
            spans[tid] = (min(got), min(releases))
    real = _max_overlap(spans, strict=True)
    if cap is not None and real[0] > cap:
        bad.append(
            f"{lane}: {real[0]} clients held at once at ledger time {real[1]:.3f} "
            f"(capacity {cap}): {sorted(real[2])}"
        )


def _max_overlap(
    intervals: Mapping[str, tuple[float, float]], *, strict: bool = False
) -> tuple[int, float, set[str]]:
    """The largest number of intervals covering one instant, that instant and who.
    Half-open [start, end): an end and a start at the same time do not overlap (server
    times within EPSILON count as the same); `strict` takes the times as they are."""
    eps = 0.0 if strict else EPSILON
    events: list[tuple[float, int, str]] = []
    for tid, (start, end) in intervals.items():
        if end - start <= eps:
            continue  # held for no time at all
        events.append((start, 1, tid))
        events.append((end - eps, 0, tid))  # ends sort before starts at the same time
    events.sort()
    now: set[str] = set()
    best: tuple[int, float, set[str]] = (0, 0.0, set())
    for t, kind, tid in events:
        if kind == 0:
            now.discard(tid)
        else:
            now.add(tid)
            if len(now) > best[0]:
                best = (len(now), t, set(now))
    return best


def _check_revivals(
    view: LaneView, records: dict[str, _Record], seen: dict[str, list[_Seen]], report: Report
) -> None:
    """(e) ended stays ended; held never goes back to queued."""
    lane, bad = view.lane, report.violations
    for tid, observations in seen.items():
        ended = [
            s.entry.replied_at
            for s in observations
            if s.state in ENDED_STATES and s.entry.replied_at is not None
        ]
        held = [
            s.entry.replied_at
            for s in observations
            if s.state == "held" and s.entry.replied_at is not None
        ]
        ended_at = min(ended) if ended else None
        held_at = min(held) if held else None
        for s in sorted(observations, key=lambda s: s.entry.sent_at):
            if ended_at is not None and s.state in LIVE_STATES and s.entry.sent_at > ended_at:
                bad.append(
                    f"{lane}: ticket {tid} revived: shown ended in a reply at {ended_at:.3f}, "
                    f"then {s.state} to {s.entry.describe()}"
                )
                break
            if held_at is not None and s.state == "queued" and s.entry.sent_at > held_at:
                bad.append(
                    f"{lane}: ticket {tid} went back to queued: shown held in a reply at "
                    f"{held_at:.3f}, then queued to {s.entry.describe()}"
                )
                break
        rec = records.get(tid)
        if ended_at is not None and rec is not None and rec.live:
            bad.append(
                f"{lane}: ticket {tid} was shown ended (reply at {ended_at:.3f}) and the "
                f"server lists it {rec.state}"
            )
