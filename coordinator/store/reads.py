"""The read queries of a lane, written once for both lane stores (coordinator/store/sqlite.py
and postgres.py), and the reads built on them (`LaneReads`).

The SQLite store keeps one lane per file; the PostgreSQL store keeps every lane in one
database, `lane` first in every key. A `Dialect` says which: the driver's parameter style
("?" for sqlite3, "%s" for psycopg) and whether rows carry the lane (then every query starts
its WHERE with `lane = <placeholder>` and takes the lane as its first parameter), plus the few
words only one engine has. The row -> model conversions are in rows.py."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from coordinator.constants import MACHINES_LISTED_MAX
from coordinator.engine.model import Incident, Receipt, Ticket
from coordinator.store.rows import (
    ENDED,
    HOLDS_IN_FLIGHT,
    INCIDENT_COLUMNS,
    RECEIPT_COLUMNS,
    TICKET_COLUMNS,
    Row,
    incident_from_row,
    receipt_from_row,
    ticket_from_row,
)


@dataclass(frozen=True)
class Dialect:
    placeholder: str  # "?" (sqlite3) or "%s" (psycopg)
    lane_column: bool  # every lane in one database: `lane` leads every key
    arrival: str  # what orders receipts stored in the same second (SQLite: rowid)
    live_from: str  # where the live tickets are read (SQLite names their index)
    seen_since: str  # rows.seen_since as SQL: the oldest machines-seen row a snapshot loads


class ReadQueries:
    """Every read of one lane in a dialect. Parameters: `args(lane, ...)`."""

    def __init__(self, d: Dialect) -> None:
        p = d.placeholder
        self.lane_column = d.lane_column
        # before another condition / as the only one
        lane = f"lane = {p} AND " if d.lane_column else ""
        where_lane = f" WHERE lane = {p}" if d.lane_column else ""
        tickets = f"SELECT {TICKET_COLUMNS} FROM tickets"
        receipts = f"SELECT {RECEIPT_COLUMNS} FROM receipts"
        ended = f"WHERE {lane}{ENDED}"  # the lane's history
        log = "ORDER BY ended_at DESC, seq DESC LIMIT"
        self.live = f"{tickets}{d.live_from} WHERE {lane}state IN ('queued', 'held') ORDER BY seq"
        # the in-flight jobs a lane loads (its index: tickets_in_flight, the same WHERE)
        self.in_flight = f"{tickets} WHERE {lane}{HOLDS_IN_FLIGHT} ORDER BY in_flight_until"
        self.projects = f"SELECT project, last_fence FROM projects{where_lane}"
        self.holds = (
            f"SELECT project, ended_at - held_at AS d FROM tickets {ended} AND held_at IS NOT NULL "
            f"{log} {p}"
        )
        # the lane's last grants, by fence (a grant's fence: its index), for their ETA errors:
        # every ticket ever granted that is still stored (held, in flight or in the render
        # log) and was given a first ETA
        self.eta_errors = (
            f"SELECT eta_first_seconds, enqueued_at, held_at FROM tickets WHERE {lane}"
            "fence IS NOT NULL AND held_at IS NOT NULL AND eta_first_seconds IS NOT NULL "
            f"ORDER BY fence DESC LIMIT {p}"
        )
        self.seen = (
            f"SELECT machine_id, last_seen_at FROM machines_seen WHERE {lane}last_seen_at >= "
            f"{d.seen_since} ORDER BY last_seen_at DESC LIMIT {MACHINES_LISTED_MAX}"
        )
        self.ticket = f"{tickets} WHERE {lane}ticket_id = {p}"
        self.receipt = f"{receipts} WHERE {lane}receipt_id = {p}"
        self.recent_receipts = (
            f"{receipts}{where_lane} ORDER BY created_at DESC, {d.arrival} DESC LIMIT {p}"
        )
        self.ticket_receipts = (
            f"{receipts} WHERE {lane}ticket_id = {p} ORDER BY created_at, {d.arrival}"
        )
        self.history = f"{tickets} {ended} {log} {p}"
        self.project_history = f"{tickets} {ended} AND project = {p} {log} {p}"
        self.history_count = f"SELECT count(*) AS n FROM tickets {ended}"
        self.incidents = (
            f"SELECT id, {INCIDENT_COLUMNS} FROM incidents{where_lane} ORDER BY id DESC LIMIT {p}"
        )
        # the ended tickets a history prune removes first (never one whose in-flight job
        # still holds a slot: the lane loads it from its row)
        self.oldest_ended = (
            f"SELECT ticket_id FROM tickets {ended} AND NOT ({HOLDS_IN_FLIGHT}) "
            f"ORDER BY ended_at ASC, seq ASC LIMIT {p}"
        )

    def args(self, lane: str, *args: Any) -> tuple[Any, ...]:
        """A query's parameters: the lane first where rows carry it."""
        return (lane, *args) if self.lane_column else args


SQLITE_READS = ReadQueries(
    Dialect(
        placeholder="?",
        lane_column=False,
        arrival="rowid",
        # (the live tickets' index since migration 0005: tickets_live_identity)
        live_from=" INDEXED BY tickets_live_identity",
        seen_since="?",  # rows.seen_since(the lane_head row's last_now)
    )
)
POSTGRES_READS = ReadQueries(
    Dialect(
        placeholder="%s",
        lane_column=True,
        arrival="id",  # (pg_migrations/0001: `id` only orders receipts of the same second)
        live_from="",
        # rows.seen_since, from the lanes row in the same statement (no second round trip);
        # parameters: the lane, EVIDENCE_RECENT_SECONDS
        seen_since="COALESCE((SELECT last_now FROM lanes WHERE lane = %s), 0.0) - %s",
    )
)


class LaneReads(ABC):
    """The reads of `coordinator.engine.store.LaneStore`, once for both stores: each gives
    its queries (`_reads`), its lane and `_read` (rows of a query, StoreError on failure)."""

    _reads: ClassVar[ReadQueries]
    lane: str

    @abstractmethod
    def _read(self, sql: str, args: Sequence[Any] = ()) -> Sequence[Row]: ...

    def _rows(self, sql: str, *args: Any) -> Sequence[Row]:
        return self._read(sql, self._reads.args(self.lane, *args))

    def get_ticket(self, ticket_id: str) -> Ticket | None:
        rows = self._rows(self._reads.ticket, ticket_id)
        return ticket_from_row(rows[0], self.lane) if rows else None

    def get_receipt(self, receipt_id: str) -> Receipt | None:
        rows = self._rows(self._reads.receipt, receipt_id)
        return receipt_from_row(rows[0]) if rows else None

    def recent_receipts(self, limit: int) -> list[Receipt]:
        return [receipt_from_row(r) for r in self._rows(self._reads.recent_receipts, limit)]

    def receipts_for_ticket(self, ticket_id: str) -> list[Receipt]:
        return [receipt_from_row(r) for r in self._rows(self._reads.ticket_receipts, ticket_id)]

    def history(self, limit: int, project: str | None) -> list[Ticket]:
        if project is None:
            rows = self._rows(self._reads.history, limit)
        else:
            rows = self._rows(self._reads.project_history, project, limit)
        return [ticket_from_row(r, self.lane) for r in rows]

    def history_count(self) -> int:
        return int(self._rows(self._reads.history_count)[0]["n"])

    def incidents(self, limit: int) -> list[tuple[int, Incident]]:
        return [incident_from_row(r) for r in self._rows(self._reads.incidents, limit)]
