"""A lane's live state, its indexes and the queue math: the simulated round-robin order,
a queued ticket's position and ETA (docs/protocol.md#fairness). `LaneCore` builds on it."""

from __future__ import annotations

from collections import deque

from sortedcontainers import SortedList

from coordinator.constants import ETA_HOLD_SAMPLE_SIZE, EVIDENCE_RECENT_SECONDS, SEEN_WRITE_SECONDS
from coordinator.engine.eta_error import EtaErrors, grant_error
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
        self.holds: deque[float] = deque(snapshot.recent_holds, maxlen=ETA_HOLD_SAMPLE_SIZE)
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
        if not self.holds:
            return self.settings.default_hold_seconds
        return sum(self.holds) / len(self.holds)

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

    def _slot_free_times(self, now: float) -> list[float]:
        h = self.hold_estimate()
        cap = max(self.settings.capacity, 1)
        remaining = [
            max(0.0, h - (now - (now if t.held_at is None else t.held_at)))
            for t in self.held.values()
        ]
        # An in-flight job's driver is gone: only a receipt, a reconcile or its holdUntil
        # is known to end it, so its slot frees at holdUntil (docs/decisions.md).
        remaining.extend(
            max(0.0, t.in_flight_until - now)
            for t in self.in_flight.values()
            if t.in_flight_until is not None
        )
        remaining.sort()
        extra = max(0, len(remaining) - cap)
        padded = [0.0] * max(0, cap - len(remaining)) + remaining
        return padded[extra:] if extra else padded

    def eta(self, position: int, now: float, free: list[float] | None = None) -> float:
        """ETA formula (docs/protocol.md): pause left + the p-th slot's free time + waves × hold.

        slot = (p-1) mod capacity, wave = (p-1) div capacity; a held slot frees after
        max(0, hold - held_for); hold = mean of the last 20 measured holds (or the default);
        an in-flight job's slot frees at its holdUntil (holdUntil - now); a wave never starts
        before the previous wave's last slot frees, so the ETA never decreases with position.
        """
        if position <= 0:
            return 0.0
        if free is None:
            free = self._slot_free_times(now)
        cap = max(self.settings.capacity, 1)
        pause_left = max(0.0, self.pause.until - now) if self.paused(now) and self.pause else 0.0
        slot = min((position - 1) % cap, len(free) - 1)
        wave = (position - 1) // cap
        hold = self.hold_estimate()
        wait = free[slot] + wave * hold
        if wave:  # never before the previous wave's last slot (an in-flight job's may be late)
            wait = max(wait, free[-1] + (wave - 1) * hold)
        return round(pause_left + wait, 3)
