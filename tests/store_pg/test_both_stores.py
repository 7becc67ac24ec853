"""The lane store contract (engine/store.py), one suite run on both stores: SqliteLaneStore
on a temp file and PostgresLaneStore on a fresh database. The one copy of these behaviour
tests, so the two stores cannot drift apart; what only the SQLite store has (lane files,
their migrations, backups) is in tests/unit/store/test_sqlite.py."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator.engine.lane import LaneCore
from coordinator.engine.model import (
    Change,
    Incident,
    LaneSnapshot,
    Pause,
    PruneHistory,
    PruneIncidents,
    PutCounters,
    PutIncident,
    PutPause,
    PutProjectServed,
    PutReceipt,
    PutTicket,
    TicketState,
)
from coordinator.errors import StoreError
from tests.store_pg.kit import AnyStore, Stores, ended, receipt, ticket, write
from tests.unit.kit import LANE, T0, Harness, make_settings

# ---------------------------------------------------------------- round trips


def test_empty_store_loads_empty_snapshot(store: AnyStore) -> None:
    assert store.load() == LaneSnapshot()
    assert store.history(100, None) == [] and store.history_count() == 0
    assert store.recent_receipts(50) == [] and store.incidents(10) == []
    assert store.get_ticket("t_x") is None and store.get_receipt("r") is None


def test_ticket_round_trip_every_field(stores: Stores, store: AnyStore) -> None:
    held = ticket("t_1", 1, state=TicketState.HELD, claim=None)
    held.heartbeat_at = T0 + 5
    done = ended("t_2", 2, T0 + 50, held_at=T0 + 10)
    done.late_outcome = "failed"
    done.provider_job_id = "job-7"
    done.note = "a note ✓ 'quoted' \"twice\""
    queued = ticket("t_3", 3, project="q", scene="sc", prompt="ph", machine="mB", claim="cB")
    write(store, [PutTicket(held), PutTicket(done), PutTicket(queued)])
    store = stores.reopen(store)
    for t in (held, done, queued):
        assert store.get_ticket(t.ticket_id) == t
    snap = store.load()
    assert snap.live == [held, queued]  # live only, in seq order
    assert snap.history_count == 1


def test_ticket_upsert_updates_state(store: AnyStore) -> None:
    t = ticket("t_1", 1)
    write(store, [PutTicket(t)])
    t.state = TicketState.HELD
    t.held_at, t.lease_expires_at, t.fence = T0 + 3, T0 + 63, 1
    write(store, [PutTicket(t)])
    t.state, t.outcome, t.ended_at = TicketState.EXPIRED, "expired", T0 + 63
    write(store, [PutTicket(t)])
    assert store.get_ticket("t_1") == t
    assert store.load().live == []


def test_superseded_writes_in_one_batch_keep_the_last(store: AnyStore) -> None:
    t = ticket("t_1", 1)
    held = ticket("t_1", 1, state=TicketState.HELD)
    write(store, [PutTicket(t), PutCounters(1, 2), PutTicket(held), PutCounters(3, 4)])
    snap = store.load()
    assert snap.live == [held] and (snap.last_fence, snap.next_seq) == (3, 4)


def test_counters_projects_pause_round_trip(stores: Stores, store: AnyStore) -> None:
    pause = Pause("provider-human-check", T0, T0 + 900, "mA", None, "t_1")
    write(
        store,
        [
            PutCounters(last_fence=7, next_seq=12),
            PutProjectServed("A", 3, T0),
            PutProjectServed("B", 7, T0 + 1),
            PutProjectServed("A", 5, T0 + 2),  # later grant wins
            PutPause(pause),
        ],
    )
    store = stores.reopen(store)
    snap = store.load()
    assert (snap.last_fence, snap.next_seq) == (7, 12)
    assert snap.project_served == {"A": 5, "B": 7}
    assert snap.pause == pause
    other = Pause("provider-rate-limit", T0 + 1, T0 + 60, "mB", "cB", "t_2")
    write(store, [PutCounters(8, 13), PutPause(other)])  # a pause replaces the last one
    assert store.load().pause == other
    write(store, [PutPause(None)])
    snap = store.load()
    assert (snap.last_fence, snap.next_seq) == (8, 13)
    assert snap.pause is None


def test_receipts_round_trip(stores: Stores, store: AnyStore) -> None:
    r1 = receipt("t_1", "lease-acquired", T0)
    r2 = receipt("t_1", "provider-submitted", T0 + 5, verified=False)
    r3 = receipt("t_2", "lease-acquired", T0 + 3, verified=None)
    r4 = receipt("t_2", "provider-submitted", T0 + 3)  # same second as r3: stored order
    write(store, [PutReceipt(r1), PutReceipt(r2), PutReceipt(r3), PutReceipt(r4)])
    store = stores.reopen(store)
    assert store.get_receipt(r2.receipt_id) == r2
    assert store.get_receipt(r3.receipt_id) == r3
    assert store.recent_receipts(50) == [r2, r4, r3, r1]  # newest first
    assert store.recent_receipts(2) == [r2, r4]
    assert store.receipts_for_ticket("t_1") == [r1, r2]  # oldest first
    assert store.receipts_for_ticket("t_2") == [r3, r4]
    assert store.receipts_for_ticket("t_9") == []


def test_receipt_is_never_overwritten(store: AnyStore) -> None:
    r = receipt("t_1")
    write(store, [PutReceipt(r)])
    with pytest.raises(StoreError):
        write(store, [PutReceipt(r)])
    assert store.recent_receipts(50) == [r]


def test_incidents_round_trip_and_last_collision(store: AnyStore) -> None:
    i1 = Incident("lease-expired", T0, "t_1", "mA", {"fence": 1})
    i2 = Incident("duplicate-collision", T0 + 1, "t_2", "mB", {"ticketId": "t_2", "n": [1]})
    i3 = Incident("provider-cooldown-started", T0 + 2, None, None, {"f": 1.5, "s": "x"})
    write(store, [PutIncident(i1), PutIncident(i2)])
    write(store, [PutIncident(i3)])
    rows = store.incidents(10)
    assert rows == [(3, i3), (2, i2), (1, i1)]  # newest first, ids from 1 per lane
    assert store.incidents(1) == [(3, i3)]
    snap = store.load()
    assert snap.incident_count == 3
    assert snap.last_collision == {"ticketId": "t_2", "n": [1]}


def test_credentials_round_trip_on_every_row(stores: Stores, store: AnyStore) -> None:
    """docs/protocol.md#credentials: the credential each row records (migration 0008 / pg 0005)."""
    live = ticket("t_1", 1, state=TicketState.HELD)
    live.credential = "studio-a"
    done = ended("t_2", 2, T0 + 50, held_at=T0 + 10)
    done.credential, done.released_by = "studio-b", "ops"
    rec = dataclasses.replace(receipt("t_1"), credential="studio-a")
    pause = Pause("provider-human-check", T0, T0 + 900, "mA", None, "t_1", "studio-a")
    inc = Incident("late-release", T0, "t_2", "mB", {"fence": 2}, "ops")
    write(store, [PutTicket(live), PutTicket(done), PutReceipt(rec), PutPause(pause)])
    write(store, [PutIncident(inc)])
    # a later write of the ticket keeps who created it (the ticket's row is updated)
    done.released_by = "ops-2"
    write(store, [PutTicket(done)])
    store = stores.reopen(store)
    assert store.get_ticket("t_1") == live and store.get_ticket("t_2") == done
    assert store.history(10, None)[0].released_by == "ops-2"
    assert store.get_receipt(rec.receipt_id) == rec and store.recent_receipts(5) == [rec]
    assert store.incidents(5) == [(1, inc)]
    snap = store.load()
    assert snap.pause == pause and snap.live == [live]


def test_incident_ids_are_never_reused(store: AnyStore) -> None:
    write(store, [PutIncident(Incident("lease-expired", T0 + i, None, None, {})) for i in range(3)])
    write(store, [PruneIncidents(keep=0, excess=3)])
    store.begin()  # a rolled-back incident takes no id either
    store.apply([PutIncident(Incident("lease-expired", T0, None, None, {}))])
    store.abort()
    write(store, [PutIncident(Incident("late-release", T0 + 9, None, None, {}))])
    assert store.incidents(10) == [(4, Incident("late-release", T0 + 9, None, None, {}))]


def test_recent_holds_in_snapshot(store: AnyStore) -> None:
    """The lane's last 200 holds with their projects, the oldest first (what the ETA's
    lane and project means are taken from, engine/eta_estimate.py)."""
    changes: list[Change] = []
    for i in range(205):
        held_at = T0 + 1000 * i
        project = "p" if i % 3 else "q"
        t = ended(f"t_{i}", i + 1, held_at + i + 1, held_at=held_at, project=project)
        changes.append(PutTicket(t))
    changes.append(PutTicket(ended("t_n", 999, T0 + 9e6)))  # never held: no hold sample
    write(store, changes)
    snap = store.load()
    want = [("p" if i % 3 else "q", float(i + 1)) for i in range(5, 205)]
    assert snap.recent_holds == want
    assert snap.history_count == 206


def test_recent_eta_errors_in_snapshot(store: AnyStore) -> None:
    """The last 100 grants by fence — held, in flight or ended — each |etaFirst − wait|;
    tickets never granted, or with no first ETA, are not grants that count."""
    changes: list[Change] = []
    want: list[float] = []
    for i in range(1, 121):
        t = ended(f"t_{i}", i, T0 + 1000 + i, held_at=T0 + i + i % 7)  # waited i % 7 s
        t.eta_first_seconds = float(i % 5)
        changes.append(PutTicket(t))
        want.append(float(abs(i % 5 - i % 7)))
    holding = ended("t_f", 121, T0 + 2000, held_at=T0 + 121 + 3)
    holding.eta_first_seconds, holding.submitted_at, holding.in_flight_until = 10.0, T0, T0 + 9e3
    held = ticket("t_h", 122, state=TicketState.HELD, held_at=T0 + 122 + 0.5)
    held.eta_first_seconds = 0.25
    want += [7.0, 0.25]
    queued = ticket("t_q", 123)
    queued.eta_first_seconds = 60.0  # given, not yet granted
    old = ticket("t_o", 124, state=TicketState.HELD, scene="old")  # no first ETA recorded
    changes += [PutTicket(holding), PutTicket(held), PutTicket(queued), PutTicket(old)]
    write(store, changes)
    snap = store.load()
    assert snap.recent_eta_errors == want[-100:]  # the oldest grant first
    assert store.get_ticket("t_q") == queued and store.get_ticket("t_o") == old


def test_core_round_trip_through_store(stores: Stores, store: AnyStore) -> None:
    """Changes a LaneCore emits, applied and loaded back, rebuild the same lane."""
    h = Harness(2, lease=60.0)
    a = h.tid("A")
    h.tid("A")
    h.tid("B")
    h.later(1).tid("C")
    h.tid("B")
    h.later(5).release(a)
    h.cooldown(sorted(h.held())[0], 600)
    h.receipt(sorted(h.held())[0])
    h.acquire("A", "dup", machine="mA")
    h.acquire("A", "dup", machine="mB", claim="cB")  # collision
    write(store, h.changes)
    store = stores.reopen(store)
    snap = store.load()
    core = LaneCore(LANE, make_settings(2, lease=60.0), snap, h.now)
    assert set(core.held) == h.held()
    assert [t.ticket_id for t in core.promotion_order(100)] == h.order()
    assert core.last_fence == h.core.last_fence and core.next_seq == h.core.next_seq
    assert core.served == h.core.served
    assert core.pause == h.core.pause
    assert core.last_collision == h.core.last_collision
    assert core.hold_samples.recent() == h.core.hold_samples.recent() != []
    assert core.eta_errors.recent() == h.core.eta_errors.recent() != []
    assert core.status(h.now, 10).eta_error == h.core.status(h.now, 10).eta_error
    assert store.get_ticket(a) == h.t(a)


# ---------------------------------------------------------------- atomicity


def test_failed_transaction_leaves_nothing(store: AnyStore) -> None:
    r = receipt("t_0")
    write(store, [PutReceipt(r)])
    batch: list[Change] = [
        PutTicket(ticket("t_1", 1)),
        PutCounters(5, 6),
        PutProjectServed("A", 5, T0),
        PutPause(Pause("provider-human-check", T0, T0 + 60, "mA", None, "t_1")),
        PutIncident(Incident("lease-expired", T0, "t_1", "mA", {})),
        PutReceipt(receipt("t_1")),
        PutReceipt(r),  # duplicate primary key: the whole batch must fail
    ]
    with pytest.raises(StoreError) as exc:
        write(store, batch)
    message = exc.value.message.lower()
    assert "unique" not in message and "duplicate" not in message  # never the driver's text
    snap = store.load()
    assert snap == LaneSnapshot(version=1, last_now=T0)  # only the receipt's transaction
    assert store.get_ticket("t_1") is None
    assert store.recent_receipts(50) == [r]
    assert store.incidents(10) == []
    # The store still works after the failed transaction.
    assert write(store, [PutTicket(ticket("t_1", 1))]) == 2
    assert store.get_ticket("t_1") is not None


def test_constraint_one_live_ticket_per_identity(store: AnyStore) -> None:
    write(store, [PutTicket(ticket("t_1", 1, scene="s"))])
    with pytest.raises(StoreError):
        write(store, [PutTicket(ticket("t_2", 2, scene="s"))])
    # Once the first one ended, the identity is free again.
    write(
        store,
        [PutTicket(ended("t_1", 1, T0 + 5, scene="s")), PutTicket(ticket("t_2", 2, scene="s"))],
    )
    assert [t.ticket_id for t in store.load().live] == ["t_2"]


def test_closed_store_raises_store_error(stores: Stores) -> None:
    with pytest.raises(StoreError):  # never opened
        stores.make().load()
    s = stores.new()
    s.close()
    with pytest.raises(StoreError):
        s.load()
    with pytest.raises(StoreError):
        write(s, [PutCounters(1, 2)])


# ---------------------------------------------------------------- the lane transaction


def test_finish_adds_one_to_the_version_and_keeps_the_latest_now(store: AnyStore) -> None:
    assert store.begin().version == 0
    assert store.finish(None, T0 + 5) == 1
    assert write(store, [PutCounters(0, 2)], last_now=T0 + 2) == 2  # an earlier now
    head = store.begin()
    assert (head.version, head.last_now) == (2, T0 + 5)  # last_now never runs back
    store.abort()
    snap = store.load()
    assert (snap.version, snap.last_now, snap.next_seq) == (2, T0 + 5, 2)


def test_abort_keeps_nothing_and_no_new_version(store: AnyStore) -> None:
    store.begin()
    store.apply([PutTicket(ticket("t_1", 1)), PutCounters(1, 2)])
    store.abort()
    assert store.get_ticket("t_1") is None
    assert store.begin().version == 0
    store.abort()
    store.abort()  # no-op outside a transaction
    assert store.load() == LaneSnapshot()


def test_apply_and_finish_need_a_transaction(store: AnyStore) -> None:
    with pytest.raises(StoreError):
        store.apply([PutCounters(1, 2)])
    with pytest.raises(StoreError):
        store.finish(None, T0)
    store.begin()
    with pytest.raises(StoreError):
        store.begin()  # one transaction at a time
    store.abort()


def test_reads_inside_a_transaction_see_its_changes(store: AnyStore) -> None:
    store.begin()
    store.apply([PutTicket(ended("t_1", 1, T0 + 5)), PutReceipt(receipt("t_1"))])
    assert store.get_ticket("t_1") is not None
    assert store.history_count() == 1 and len(store.receipts_for_ticket("t_1")) == 1
    assert store.load().history_count == 1
    store.abort()
    assert store.get_ticket("t_1") is None


# ---------------------------------------------------------------- history and retention


def test_history_newest_first_and_project_filter(store: AnyStore) -> None:
    write(store,
        [
            PutTicket(ended("t_1", 1, T0 + 10, project="A")),
            PutTicket(ended("t_2", 2, T0 + 30, project="B")),
            PutTicket(ended("t_3", 3, T0 + 20, project="A")),
            PutTicket(ended("t_4", 4, T0 + 30, project="A")),  # same end as t_2: seq breaks it
            PutTicket(ticket("t_5", 5, project="A")),  # live: not in the log
            PutTicket(ticket("t_6", 6, state=TicketState.EXPIRED, ended_at=T0 + 5, project="B",
                             outcome="expired")),
        ]
    )  # fmt: skip
    assert [t.ticket_id for t in store.history(100, None)] == ["t_4", "t_2", "t_3", "t_1", "t_6"]
    assert [t.ticket_id for t in store.history(2, None)] == ["t_4", "t_2"]
    assert [t.ticket_id for t in store.history(100, "A")] == ["t_4", "t_3", "t_1"]
    assert [t.ticket_id for t in store.history(1, "B")] == ["t_2"]
    assert [t.ticket_id for t in store.history(100, "B")] == ["t_2", "t_6"]
    assert store.history(100, "Z") == []
    assert store.history_count() == 5


def test_prune_history_keeps_newest_and_their_receipts(store: AnyStore) -> None:
    changes: list[Change] = []
    for i in range(1, 7):
        changes.append(PutTicket(ended(f"t_{i}", i, T0 + 10 * i)))
        changes.append(PutReceipt(receipt(f"t_{i}", at=T0 + 10 * i)))
    live = ticket("t_live", 50)
    changes += [PutTicket(live), PutReceipt(receipt("t_live", at=T0 + 500))]
    write(store, changes)
    write(store, [PruneHistory(keep=4, excess=2), PruneHistory(keep=3, excess=1)])
    assert [t.ticket_id for t in store.history(100, None)] == ["t_6", "t_5", "t_4"]
    assert store.history_count() == 3
    for i in (1, 2, 3):
        assert store.get_ticket(f"t_{i}") is None
        assert store.receipts_for_ticket(f"t_{i}") == []
    for i in (4, 5, 6):
        assert len(store.receipts_for_ticket(f"t_{i}")) == 1
    # Live tickets and their receipts are never pruned.
    assert store.get_ticket("t_live") == live
    assert len(store.receipts_for_ticket("t_live")) == 1


def test_prune_history_from_core_keeps_retention(store: AnyStore) -> None:
    h = Harness(1, history=4)
    for i in range(10):
        tid = h.tid(f"p{i % 3}")
        h.receipt(tid)
        h.later(1).release(tid)
    write(store, h.changes)
    rows = store.history(100, None)
    assert len(rows) == 4 and store.history_count() == 4
    kept = [t.ticket_id for t in rows]
    newest = sorted(h.tickets, key=lambda t: h.t(t).seq, reverse=True)[:4]
    assert kept == newest
    assert {r.ticket_id for r in store.recent_receipts(50)} == set(kept)


def test_prune_incidents_keeps_newest(store: AnyStore) -> None:
    write(
        store,
        [PutIncident(Incident("lease-expired", T0 + i, None, None, {"i": i})) for i in range(6)],
    )
    write(store, [PruneIncidents(keep=2, excess=4)])
    assert [i.detail["i"] for _, i in store.incidents(10)] == [5, 4]
    assert store.load().incident_count == 2


# ---------------------------------------------------------------- two writers, one lane


def test_another_writer_sees_the_new_version_and_the_changes(stores: Stores) -> None:
    a, b = stores.new(), stores.new()
    a.begin()
    a.apply([PutTicket(ticket("t_1", 1)), PutCounters(0, 2)])
    assert a.finish(T0 + 60, T0) == 1
    head = b.begin()
    assert (head.version, head.last_now) == (1, T0)
    snap = b.load()
    assert [t.ticket_id for t in snap.live] == ["t_1"] and snap.next_seq == 2
    b.apply([PutCounters(0, 3)])
    assert b.finish(None, T0 - 5) == 2  # b's clock is behind: the lane's now stays
    assert a.begin().last_now == T0
    a.abort()
