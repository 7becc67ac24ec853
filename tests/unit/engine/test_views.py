"""Wire views of stored records (coordinator/engine/views.py): render-log rows with their
wait and hold times, outcome counts, receipt rows and summaries, incident rows."""

from __future__ import annotations

from coordinator.engine.model import Incident, Receipt, Ticket, TicketState
from coordinator.engine.views import (
    history_row,
    incident_row,
    log_row,
    outcome_counts,
    receipt_row,
    receipt_summary,
)
from coordinator.protocol.receipts import PAYLOAD_OMITTED_KEY
from tests.unit.kit import LANE, T0


def _ended(held_at: float | None, ended_at: float, outcome: str | None = "completed") -> Ticket:
    return Ticket(
        ticket_id="t_0001",
        lane=LANE,
        state=TicketState.DONE,
        machine_id="mA",
        claim_id="cA",
        project="p",
        scene="s1",
        prompt_hash="h",
        seq=1,
        enqueued_at=T0,
        lease_seconds=60.0,
        last_seen_at=T0,
        held_at=held_at,
        fence=None if held_at is None else 7,
        outcome=outcome,
        provider_job_id="job-1",
        note="n",
        ended_at=ended_at,
    )


def _receipt(payload_json: str = '{"a":1}', verified: bool | None = True) -> Receipt:
    return Receipt("r1", "t_0001", "lease-acquired", "mA", payload_json, "sha256:x", verified, T0)


def test_a_history_row_measures_the_wait_and_the_hold() -> None:
    row = history_row(_ended(held_at=T0 + 1.23456, ended_at=T0 + 11.0))
    assert row.wait_seconds == 1.235
    assert row.hold_seconds == 9.765
    assert (row.ticket_id, row.fence, row.outcome) == ("t_0001", 7, "completed")
    assert (row.provider_job_id, row.note, row.ended_at) == ("job-1", "n", T0 + 11.0)


def test_a_ticket_never_held_has_no_wait_or_hold() -> None:
    row = history_row(_ended(held_at=None, ended_at=T0 + 5, outcome="abandoned"))
    assert row.wait_seconds is None and row.hold_seconds is None and row.fence is None


def test_times_from_a_clock_that_ran_back_are_never_negative() -> None:
    t = _ended(held_at=T0 - 2, ended_at=T0 - 3)
    row = history_row(t)
    assert row.wait_seconds == 0.0 and row.hold_seconds == 0.0


def test_a_log_row_is_a_history_row_that_names_its_lane() -> None:
    t = _ended(held_at=T0 + 1, ended_at=T0 + 2)
    row = log_row("duo:main", t)
    assert row.lane == "duo:main"
    assert row.hold_seconds == history_row(t).hold_seconds


def test_outcome_counts_count_a_missing_outcome_as_null_in_key_order() -> None:
    rows = [history_row(_ended(T0, T0 + 1, outcome)) for outcome in ("failed", None, "failed", "a")]
    counts = outcome_counts(rows)
    assert counts == {"a": 1, "failed": 2, "null": 1}
    assert list(counts) == ["a", "failed", "null"]
    assert outcome_counts([]) == {}


def test_a_receipt_row_shows_the_payload_and_the_verdict() -> None:
    row = receipt_row(_receipt(verified=None))
    assert row.payload == {"a": 1}
    assert row.content_hash_verified is None
    assert (row.receipt_id, row.phase, row.created_at) == ("r1", "lease-acquired", T0)


def test_a_stored_payload_that_is_not_an_object_reads_as_omitted() -> None:
    assert PAYLOAD_OMITTED_KEY in receipt_row(_receipt("[1, 2]")).payload
    assert PAYLOAD_OMITTED_KEY in receipt_row(_receipt("not json")).payload


def test_a_receipt_summary_has_no_payload() -> None:
    s = receipt_summary(_receipt(verified=False))
    assert not hasattr(s, "payload")
    assert (s.receipt_id, s.content_hash, s.content_hash_verified) == ("r1", "sha256:x", False)


def test_an_incident_row_carries_its_id_and_lane() -> None:
    i = Incident("lease-expired", T0, "t_0001", "mA", {"fence": 3})
    row = incident_row(LANE, 42, i)
    assert (row.id, row.lane, row.kind, row.at) == (42, LANE, "lease-expired", T0)
    assert (row.ticket_id, row.machine_id, row.detail) == ("t_0001", "mA", {"fence": 3})
