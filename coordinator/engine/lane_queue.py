"""A lane's live state, its indexes and the queue math: the simulated round-robin order,
a queued ticket's position and ETA (docs/protocol.md#fairness). `LaneCore` builds on it."""

from __future__ import annotations

from sortedcontainers import SortedList

from coordinator.constants import ETA_SIMULATED_TICKETS, EVIDENCE_RECENT_SECONDS, SEEN_WRITE_SECONDS
from coordinator.engine.eta_error import EtaErrors, grant_error
from coordinator.engine.eta_estimate import HoldSamples, free_times, wait_at, waits
from coordinator.engine.model import (
    Effects,
    LaneSettings,
    LaneSnapshot,
    Pause,
    PruneMachinesSeen,
    PutMachineSeen,
    Ticket,
    TicketState,
)

# A project never granted in this lane sorts before every granted one.
_NEVER_SERVED = 0


class LaneQueue:
    """One lane's state and indexes, and the reads over them (order, position, ETA)."""

    def __init__(
        self,
        lane: str,
        settings: LaneSettings,
        snapshot: LaneSnapshot,
        now: float,
        *,
        coordinator: str = "",
    ):
        self.lane = lane
        self.coordinator = coordinator
        self.settings = settings
        self.last_fence = snapshot.last_fence
        self.next_seq = snapshot.next_seq
        self.served: dict[str, int] = dict(snapshot.project_served)
        self.pause: Pause | None = snapshot.pause
        self.hold_samples = HoldSamples(snapshot.recent_holds, settings.default_hold_seconds)
        self.eta_errors = EtaErrors(snapshot.recent_eta_errors)
        self.history_count = snapshot.history_count
        self.incident_count = snapshot.incident_count
        self.last_collision = snapshot.last_collision
        # The evidence's machines seen: machine -> when last seen (what evidence lists),
        # machine -> the time its stored row holds, and the machines whose row is due a write.
        self.machines_seen: dict[str, float] = dict(snapshot.machines_seen)
        self.seen_stored: dict[str, float] = dict(snapshot.machines_seen)
        self.seen_unwritten: set[str] = set()

        self.live: dict[str, Ticket] = {}
        self.by_identity: dict[tuple[str, str, str], str] = {}
        self.held: dict[str, Ticket] = {}
        self.leases: SortedList = SortedList()  # (lease_expires_at, ticket_id)
        self.queues: dict[str, SortedList] = {}  # project -> (seq, ticket_id)
        self.order: SortedList = SortedList()  # (served_fence, oldest_seq, project)
        self.order_key: dict[str, tuple[int, int, str]] = {}
        self.waiters: SortedList = SortedList()  # (deadline, ticket_id)
        self.waiter_key: dict[str, float] = {}
        # In-flight jobs (docs/protocol.md#in-flight): ended tickets whose provider job may
        # still run, each taking a slot until its holdUntil.
        self.in_flight: dict[str, Ticket] = {}
        self.hold_ends: SortedList = SortedList()  # (in_flight_until, ticket_id)
        for t in snapshot.in_flight:
            if t.holds_in_flight:
                self._hold(t)
        for t in sorted(snapshot.live, key=lambda x: x.seq):
            # A restart grants every waiter a full keep-alive window from `now`.
            if t.state is TicketState.QUEUED:
                t.last_seen_at = max(t.last_seen_at, now)
            self._index(t)

    # ------------------------------------------------------------------ indexes

    def _index(self, t: Ticket) -> None:
        self.live[t.ticket_id] = t
        self.by_identity[t.identity] = t.ticket_id
        if t.state is TicketState.HELD:
            self.held[t.ticket_id] = t
            assert t.lease_expires_at is not None
            self.leases.add((t.lease_expires_at, t.ticket_id))
        else:
            q = self.queues.get(t.project)
            if q is None:
                q = self.queues[t.project] = SortedList()
            q.add((t.seq, t.ticket_id))
            self._reorder(t.project)
            self._set_waiter_deadline(t)

    def _hold(self, t: Ticket) -> None:
        assert t.in_flight_until is not None
        self.in_flight[t.ticket_id] = t
        self.hold_ends.add((t.in_flight_until, t.ticket_id))

    def _unhold(self, t: Ticket) -> None:
        if self.in_flight.pop(t.ticket_id, None) is not None:
            assert t.in_flight_until is not None
            self.hold_ends.discard((t.in_flight_until, t.ticket_id))

    def _count_eta_error(self, t: Ticket) -> None:
        """A grant: its ETA error joins the lane's window (a ticket with no recorded first
        ETA, stored before the record existed, has none)."""
        if t.eta_first_seconds is not None and t.held_at is not None:
            self.eta_errors.add(grant_error(t.eta_first_seconds, t.enqueued_at, t.held_at))

    def slots_taken(self) -> int:
        """Held tickets and in-flight jobs: what capacity counts."""
        return len(self.held) + len(self.in_flight)

    def _unindex(self, t: Ticket) -> None:
        self.live.pop(t.ticket_id, None)
        if self.by_identity.get(t.identity) == t.ticket_id:
            del self.by_identity[t.identity]
        if t.ticket_id in self.held:
            del self.held[t.ticket_id]
            assert t.lease_expires_at is not None
            self.leases.discard((t.lease_expires_at, t.ticket_id))
        else:
            self._dequeue(t)

    def _dequeue(self, t: Ticket) -> None:
        q = self.queues.get(t.project)
        if q is not None:
            q.discard((t.seq, t.ticket_id))
            if not q:
                del self.queues[t.project]
            self._reorder(t.project)
        old = self.waiter_key.pop(t.ticket_id, None)
        if old is not None:
            self.waiters.discard((old, t.ticket_id))

    def _reorder(self, project: str) -> None:
        old = self.order_key.pop(project, None)
        if old is not None:
            self.order.discard(old)
        q = self.queues.get(project)
        if q:
            key = (self.served.get(project, _NEVER_SERVED), q[0][0], project)
            self.order_key[project] = key
            self.order.add(key)

    def _set_waiter_deadline(self, t: Ticket) -> None:
        old = self.waiter_key.get(t.ticket_id)
        if old is not None:
            self.waiters.discard((old, t.ticket_id))
        deadline = t.last_seen_at + self.settings.waiter_timeout_seconds
        self.waiter_key[t.ticket_id] = deadline
        self.waiters.add((deadline, t.ticket_id))

    def _keepalive(self, t: Ticket, now: float) -> None:
        """A waiter's call keeps it alive; kept in memory only (never a row per call)."""
        if t.state is TicketState.QUEUED and now > t.last_seen_at:
            t.last_seen_at = now
            self._set_waiter_deadline(t)

    def restore_keepalive(self, ticket_id: str, last_seen_at: float) -> None:
        """Set a waiter's keep-alive back (a host that keeps the core between calls takes
        back a keep-alive it did not persist, as a rebuild from the store would)."""
        t = self.live.get(ticket_id)
        if t is not None and t.state is TicketState.QUEUED:
            t.last_seen_at = last_seen_at
            self._set_waiter_deadline(t)

    # ------------------------------------------------------------------ machines seen

    def _seen(self, machine_id: str, now: float) -> None:
        """A call from `machine_id` (answered or refused): evidence lists it at once; its row
        is due a write when the machine is new or its row is SEEN_WRITE_SECONDS old, so a
        heartbeat loop does not write on every call (`flush_seen` writes what is due)."""
        last = self.machines_seen.get(machine_id)
        self.machines_seen[machine_id] = now if last is None else max(last, now)
        stored = self.seen_stored.get(machine_id)
        if stored is None or now - stored >= SEEN_WRITE_SECONDS:
            self.seen_unwritten.add(machine_id)

    def flush_seen(self, fx: Effects, now: float) -> None:
        """Add the machines-seen rows due a write to an answered operation's effects, and a
        prune of the rows older than EVIDENCE_RECENT_SECONDS (forgotten in memory too). A
        refused call changes nothing: its machine's row is written with the next answer."""
        if not self.seen_unwritten:
            return
        cutoff = now - EVIDENCE_RECENT_SECONDS
        for machine_id in sorted(self.seen_unwritten):
            at = self.machines_seen.get(machine_id)
            if at is not None and at >= cutoff:
                fx.changes.append(PutMachineSeen(machine_id, at))
                self.seen_stored[machine_id] = at
        self.seen_unwritten.clear()
        fx.changes.append(PruneMachinesSeen(cutoff))
        for seen in (self.machines_seen, self.seen_stored):
            for machine_id in [m for m, at in seen.items() if at < cutoff]:
                del seen[machine_id]

    # ------------------------------------------------------------------ reads

    def paused(self, now: float) -> bool:
        return self.pause is not None and now < self.pause.until

    def next_deadline(self) -> float | None:
        candidates: list[float] = []
        if self.leases:
            candidates.append(self.leases[0][0])
        if self.waiters:
            candidates.append(self.waiters[0][0])
        if self.pause is not None:
            candidates.append(self.pause.until)
        if self.hold_ends:
            candidates.append(self.hold_ends[0][0])
        return min(candidates) if candidates else None

    def is_idle(self) -> bool:
        return not self.live and self.pause is None and not self.in_flight

    def queued_count(self) -> int:
        return len(self.live) - len(self.held)

    def hold_estimate(self) -> float:
        """The lane's hold: the mean of its last measured holds, else the default."""
        return self.hold_samples.lane()

    def position(self, t: Ticket) -> int:
        """1-based place in the simulated round-robin order (docs/protocol.md#fairness); 0 when not
        queued."""
        if t.state is not TicketState.QUEUED:
            return 0
        q = self.queues[t.project]
        k = q.index((t.seq, t.ticket_id))
        my_key = self.order_key[t.project]
        pos = 1
        for key in self.order:
            count = len(self.queues[key[2]])
            pos += min(count, k)
            if key < my_key and count > k:
                pos += 1
        return pos

    def promotion_order(self, limit: int) -> list[Ticket]:
        """The first `limit` queued tickets in the order they would be granted."""
        projects = [self.queues[key[2]] for key in self.order]
        out: list[Ticket] = []
        rnd = 0
        while projects and len(out) < limit:
            still: list[SortedList] = []
            for q in projects:
                if rnd < len(q):
                    out.append(self.live[q[rnd][1]])
                    if len(out) >= limit:
                        break
                    if rnd + 1 < len(q):
                        still.append(q)
            projects = still
            rnd += 1
        return out

    def _projects_ahead(self, limit: int) -> list[str]:
        """The projects of the first `limit` queued tickets in promotion order (what
        `promotion_order` lists, without building it: round r takes each project that still
        has an r-th ticket, in the order's project order)."""
        if limit <= len(self.order):  # within the first round: every project once, in order
            return [key[2] for key in self.order.islice(0, limit)]
        counts = [(key[2], len(self.queues[key[2]])) for key in self.order]
        out: list[str] = []
        rnd = 0
        while counts and len(out) < limit:
            out.extend(p for p, _ in counts[: limit - len(out)])
            rnd += 1
            counts = [(p, n) for p, n in counts if n > rnd]
        return out

    def _slot_free_times(self, now: float) -> list[float]:
        """Each slot's seconds until it is free (eta_estimate.free_times): a held ticket's
        after its project's hold less the time it has held; an in-flight job's at its
        holdUntil — its driver is gone, only a receipt, a reconcile or the alarm is known to
        end it (docs/decisions.md)."""
        hold = self.hold_samples.project
        taken = [
            max(0.0, hold(t.project) - (now - (now if t.held_at is None else t.held_at)))
            for t in self.held.values()
        ]
        taken.extend(
            max(0.0, t.in_flight_until - now)
            for t in self.in_flight.values()
            if t.in_flight_until is not None
        )
        return free_times(taken, self.settings.capacity)

    def _pause_left(self, now: float) -> float:
        return max(0.0, self.pause.until - now) if self.paused(now) and self.pause else 0.0

    def eta(self, position: int, now: float) -> float:
        """The ETA of the queued ticket at `position` (docs/protocol.md#fairness): the pause
        left + when its turn comes, each ticket ahead of it taking the slot that frees first
        for its project's hold (the first ETA_SIMULATED_TICKETS; any further ones the lane's
        hold)."""
        if position <= 0:
            return 0.0
        hold = self.hold_samples.project
        ahead = [hold(p) for p in self._projects_ahead(min(position - 1, ETA_SIMULATED_TICKETS))]
        wait = wait_at(self._slot_free_times(now), ahead, position, self.hold_samples.lane())
        return round(self._pause_left(now) + wait, 3)

    def etas(self, queued: list[Ticket], now: float) -> list[float]:
        """`eta` of each of the first queued tickets, in promotion order, in one pass."""
        hold = self.hold_samples.project
        holds = [hold(t.project) for t in queued[:ETA_SIMULATED_TICKETS]]
        free = self._slot_free_times(now)
        pause_left = self._pause_left(now)
        at = waits(free, holds, len(queued), self.hold_samples.lane())
        return [round(pause_left + wait, 3) for wait in at]
