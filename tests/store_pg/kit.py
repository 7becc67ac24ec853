"""Records and store plumbing shared by the store suites (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from coordinator.engine.model import Change, Receipt, Ticket, TicketState
from coordinator.store.postgres import PostgresLaneStore, migrate
from coordinator.store.sqlite import SqliteLaneStore
from tests.unit.kit import LANE, T0

HASH_A = "sha256:" + "a" * 64

AnyStore = SqliteLaneStore | PostgresLaneStore
KINDS = ("sqlite", "postgres")


def ticket(
    tid: str,
    seq: int,
    *,
    state: TicketState = TicketState.QUEUED,
    project: str = "p",
    scene: str | None = None,
    prompt: str = "h",
    machine: str = "mA",
    claim: str | None = "cA",
    held_at: float | None = None,
    ended_at: float | None = None,
    fence: int | None = None,
    outcome: str | None = None,
    lane: str = LANE,
) -> Ticket:
    t = Ticket(
        ticket_id=tid,
        lane=lane,
        state=state,
        machine_id=machine,
        claim_id=claim,
        project=project,
        scene=scene if scene is not None else f"s{seq}",
        prompt_hash=prompt,
        seq=seq,
        enqueued_at=T0 + seq,
        lease_seconds=60.0,
        last_seen_at=T0 + seq,
        held_at=held_at,
        fence=fence,
        outcome=outcome,
        ended_at=ended_at,
    )
    if state in (TicketState.HELD, TicketState.EXPIRED) or (
        state is TicketState.DONE and held_at is not None
    ):
        t.held_at = T0 + seq if held_at is None else held_at
        t.lease_expires_at = t.held_at + 60.0
        t.fence = seq if fence is None else fence
    return t


def ended(
    tid: str,
    seq: int,
    end: float,
    *,
    project: str = "p",
    scene: str | None = None,
    held_at: float | None = None,
) -> Ticket:
    return ticket(
        tid, seq, state=TicketState.DONE, ended_at=end, outcome="completed", project=project,
        scene=scene, held_at=held_at,
    )  # fmt: skip


def receipt(
    ticket_id: str,
    phase: str = "lease-acquired",
    at: float = T0,
    *,
    content_hash: str = HASH_A,
    verified: bool | None = True,
) -> Receipt:
    return Receipt(
        receipt_id=f"{ticket_id}:{phase}:{content_hash.removeprefix('sha256:')[:16]}",
        ticket_id=ticket_id,
        phase=phase,
        machine_id="mA",
        payload_json='{"n":1}',
        content_hash=content_hash,
        content_hash_verified=verified,
        created_at=at,
    )


def write(s: AnyStore, changes: Sequence[Change], *, last_now: float = T0) -> int:
    """One lane transaction of its own (begin / apply / finish): all the changes or none."""
    s.begin()
    try:
        s.apply(changes)
    except BaseException:
        s.abort()
        raise
    return s.finish(None, last_now)


class Stores:
    """Opens stores of one lane location (a SQLite file, or a PostgreSQL database): every
    store opened here is another writer of the same lane (another process, or replica), and
    is closed at teardown."""

    def __init__(self, kind: str, make: Callable[[str], AnyStore]) -> None:
        self.kind = kind
        self._make = make
        self._opened: list[AnyStore] = []

    def make(self, lane: str = LANE) -> AnyStore:
        """A store of the lane, not opened (nor closed at teardown)."""
        return self._make(lane)

    def new(self, lane: str = LANE) -> AnyStore:
        s = self._make(lane)
        s.open()
        self._opened.append(s)
        return s

    def reopen(self, s: AnyStore) -> AnyStore:
        s.close()
        return self.new(s.lane)

    def close_all(self) -> None:
        for s in self._opened:
            s.close()


def sqlite_stores(folder: Path) -> Stores:
    return Stores("sqlite", lambda lane: SqliteLaneStore(folder / f"{lane}.sqlite", lane))


def postgres_stores(dsn: str) -> Stores:
    migrate(dsn)
    return Stores("postgres", lambda lane: PostgresLaneStore(dsn, lane))


def make_stores(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    """The `Stores` of `kind`; PostgreSQL asks for `pg_dsn` only then (SQLite runs start no
    cluster)."""
    stores = (
        sqlite_stores(tmp_path)
        if kind == "sqlite"
        else postgres_stores(request.getfixturevalue("pg_dsn"))
    )
    try:
        yield stores
    finally:
        stores.close_all()
