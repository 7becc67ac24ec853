"""A LaneCore driven through the engine's operations (acquire, await, heartbeat, receipt,
cooldown, release, status, history, evidence) gives the same replies on SQLite and on
PostgreSQL, and on two PostgreSQL "replicas" taking turns on the lane (each keeps its core,
and reloads it whenever the other one moved the lane on)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest

from coordinator.constants import SEEN_WRITE_SECONDS
from coordinator.engine.commands import (
    Acquire,
    Cooldown,
    Heartbeat,
    RecordReceipt,
    Release,
    TicketCall,
)
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import Change
from coordinator.engine.operations import (
    AcquireOp,
    AwaitOp,
    CooldownOp,
    EvidenceOp,
    HeartbeatOp,
    HistoryOp,
    Operation,
    ReceiptOp,
    ReleaseOp,
    StatusOp,
)
from coordinator.engine.store import Reads, lane_now
from coordinator.protocol.errors import LaneError
from tests.store_pg.kit import AnyStore, Stores, sqlite_stores
from tests.unit.kit import LANE, T0, make_settings

SETTINGS = make_settings(1, lease=120.0, waiter=100_000.0, history=3, incidents=4)
HASH = "sha256:" + "b" * 64


@dataclass
class _Kept:
    core: LaneCore
    version: int


@dataclass
class Host:
    """The local queue's lane transaction (client/local.py), over one or more stores of the
    same lane: operation i runs on store i % n."""

    stores: list[AnyStore]
    kept: dict[int, _Kept] = field(default_factory=dict)
    reloads: int = 0

    def run(self, i: int, op: Operation[Any], clock: float) -> Any:
        store = self.stores[i % len(self.stores)]
        head = store.begin()
        try:
            kept = self.kept.get(i % len(self.stores))
            if kept is None or kept.version != head.version:
                snap = store.load()
                kept = _Kept(LaneCore(LANE, SETTINGS, snap, 0.0), snap.version)
                self.reloads += 1
            now = lane_now(clock, head.last_now)
            core = kept.core
            changes: list[Change] = list(core.advance(now).changes)
            store.apply(changes)
            reads = Reads.perform(store, op.needs(core))
            try:
                result = op.run(core, now, reads)
                reply: Any = msgspec.to_builtins(result.reply)
                store.apply(result.fx.changes)
                changes += result.fx.changes
            except LaneError as exc:
                reply = {"error": exc.code, "message": exc.message}
            if changes:
                kept.version = store.finish(core.next_deadline(), now)
            else:
                store.abort()
            self.kept[i % len(self.stores)] = kept
            return reply
        except BaseException:
            store.abort()
            raise


def _call(tid: str, machine: str = "mA", claim: str | None = "cA") -> TicketCall:
    return TicketCall(machine_id=machine, claim_id=claim, ticket_id=tid)


def _acquire(n: int, scene: str, machine: str = "mA", claim: str | None = "cA") -> AcquireOp:
    return AcquireOp(Acquire(machine, claim, "p", scene, "h", None, f"t_{n:04d}"))


def _receipt(tid: str, phase: str) -> ReceiptOp:
    return ReceiptOp(
        RecordReceipt("mA", "cA", tid, f"{tid}:{phase}:{'b' * 16}", phase, "{}", HASH, HASH)
    )


# (seconds after T0, operation): a lane's life with a queue, a pause, a refusal, an expiry,
# retention (history 3, incidents 4) and a collision
SCRIPT: list[tuple[float, Operation[Any]]] = [
    (0, _acquire(1, "s1")),
    (1, _acquire(2, "s2", "mB", "cB")),
    (2, HeartbeatOp(Heartbeat(_call("t_0001"), None))),
    (3, _receipt("t_0001", "lease-acquired")),
    (3, _receipt("t_0001", "lease-acquired")),  # the same receipt again: 200, not stored twice
    (4, StatusOp(10, receipts=5)),
    (5, ReleaseOp(Release(_call("t_0001"), "completed", "job-1", "done"))),
    (6, AwaitOp(_call("t_0002", "mB", "cB"))),
    (7, CooldownOp(Cooldown(_call("t_0002", "mB", "cB"), "provider-rate-limit", 60))),
    (8, _acquire(3, "s3")),
    (9, ReleaseOp(Release(_call("t_0002", "mB", "cB"), "failed", None, None))),
    (10, AwaitOp(_call("t_0003"))),  # still paused: queued
    (80, AwaitOp(_call("t_0003"))),  # the pause ended: held
    (81, ReleaseOp(Release(_call("t_0003", "mB", "cB"), "completed", None, None))),  # refused
    (82, HistoryOp(10, None)),
    (83, EvidenceOp("t_0001")),
    (300, StatusOp(10)),  # t_0003's lease expired: reaped
    (301, _acquire(4, "dup")),
    (302, _acquire(5, "dup", "mB", "cB")),  # a collision with t_0004
    (303, ReleaseOp(Release(_call("t_0004"), "completed", None, None))),
    (304, _acquire(6, "s6")),
    (305, ReleaseOp(Release(_call("t_0006"), "abandoned", None, None))),
    (306, HistoryOp(10, "p")),
    (307, EvidenceOp(None)),
    (308, EvidenceOp("t_0001")),  # pruned from the history by now
    (309, ReleaseOp(Release(_call("t_0003"), "completed", None, None))),  # late release
    (310, StatusOp(10, receipts=5)),
    (311, HeartbeatOp(Heartbeat(_call("t_9999"), None))),  # no such ticket: a LaneError
]


def _replay(host: Host) -> list[Any]:
    return [host.run(i, op, T0 + at) for i, (at, op) in enumerate(SCRIPT)]


def _stored(s: AnyStore) -> tuple[Any, ...]:
    """The whole lane as a store holds it."""
    return (s.load(), s.history(10, None), s.recent_receipts(10), s.incidents(10))


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_postgres_replies_as_sqlite(tmp_path: Path, pg_stores: Stores, replicas: int) -> None:
    sqlite = sqlite_stores(tmp_path)
    try:
        reference = Host([sqlite.new() for _ in range(replicas)])
        want = _replay(reference)
        host = Host([pg_stores.new() for _ in range(replicas)])
        got = _replay(host)
        for step, (w, g) in enumerate(zip(want, got, strict=True)):
            assert g == w, f"step {step}: {SCRIPT[step][1]!r}"
        assert _stored(host.stores[0]) == _stored(reference.stores[0])
    finally:
        sqlite.close_all()
    if replicas > 1:  # every step found the lane moved on by another replica, and reloaded
        assert host.reloads >= 15
    # The script went where it meant to: a refusal, a late release, a collision, an error.
    reasons = [r.get("reason") for r in got if isinstance(r, dict)]
    assert "not-owner" in reasons and "expired" in reasons
    assert got[-4]["coordinatorEvidence"]["collision"] is not None
    assert [r["error"] for r in got if isinstance(r, dict) and "error" in r] == ["not-found"]


def _without_machines_seen(reply: Any) -> Any:
    """The reply without what a reloaded core knows only as stored: the machines seen, and
    the ETA error's window (its last grants among the rows the lane keeps: this script's
    history of 3 rows holds fewer than a never-reloaded core counted, as
    docs/protocol.md#eta-error says)."""
    if isinstance(reply, dict):
        return {
            k: _without_machines_seen(v)
            for k, v in reply.items()
            if k not in ("machinesSeen", "distinctMachines", "etaError")
        }
    if isinstance(reply, list):
        return [_without_machines_seen(v) for v in reply]
    return reply


def _machines_seen(reply: Any, out: list[dict[str, float]]) -> None:
    """Every `machinesSeen` list in a reply, as {machineId: lastSeenAt}, in order."""
    if isinstance(reply, dict):
        for k, v in reply.items():
            if k == "machinesSeen":
                out.append({m["machineId"]: m["lastSeenAt"] for m in v})
            else:
                _machines_seen(v, out)
    elif isinstance(reply, list):
        for v in reply:
            _machines_seen(v, out)


def test_replicas_answer_as_one_store_machines_seen_within_the_write_interval(
    tmp_path: Path, pg_stores: Stores
) -> None:
    """Two replicas serving one lane answer as one store does. Evidence's `machinesSeen` lists
    the same machines; a core reloaded after another replica wrote knows a machine's time as
    stored, which is written at most every SEEN_WRITE_SECONDS: at most that much behind; its
    ETA error counts the grants the lane still stores (history_retained 3 here)."""
    sqlite = sqlite_stores(tmp_path)
    try:
        one = _replay(Host([sqlite.new()]))  # one store, one core: never reloaded
    finally:
        sqlite.close_all()
    two = _replay(Host([pg_stores.new(), pg_stores.new()]))

    def wire(replies: list[Any]) -> Any:  # tuples as lists, as on the wire
        return msgspec.json.decode(msgspec.json.encode(replies))

    assert _without_machines_seen(wire(one)) == _without_machines_seen(wire(two))
    # five grants; the replicas reload the three rows the render log keeps
    assert one[-2]["etaError"]["grants"] == 5 and two[-2]["etaError"]["grants"] == 3
    seen_one: list[dict[str, float]] = []
    seen_two: list[dict[str, float]] = []
    _machines_seen(wire(one), seen_one)
    _machines_seen(wire(two), seen_two)
    assert seen_one and len(seen_one) == len(seen_two)
    for a, b in zip(seen_one, seen_two, strict=True):
        assert set(a) == set(b)
        assert all(0 <= a[m] - b[m] <= SEEN_WRITE_SECONDS for m in a), (a, b)
