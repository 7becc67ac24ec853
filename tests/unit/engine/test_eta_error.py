"""The ETA error (coordinator/engine/eta_error.py; docs/protocol.md#eta-error): one grant's
error in the render log's rounded figures, the nearest-rank median and p90, the window of the
last 100 grants kept incrementally; and the lane core recording it — the ETA a ticket was
first given (0 when granted at once, untouched by a duplicate acquire), every grant counted,
a core rebuilt from a snapshot carrying on where the old one stopped."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from coordinator.constants import ETA_ERROR_GRANTS
from coordinator.engine.eta_error import (
    EtaErrors,
    grant_error,
    nearest_rank,
    wait_seconds,
)
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import LaneSnapshot, TicketState
from coordinator.engine.views import history_row
from coordinator.protocol import replies as wire
from tests.unit.kit import LANE, T0, Harness, make_settings


def _by_rank(errors: list[float]) -> dict[str, Any] | None:
    """What etaError must say, computed the slow way: sort, take ⌈n/2⌉ and ⌈0.9 n⌉."""
    if not errors:
        return None
    s = sorted(errors)
    n = len(s)
    return {
        "grants": n,
        "medianSeconds": s[math.ceil(n * 0.5) - 1],
        "p90Seconds": s[math.ceil(n * 0.9) - 1],
    }


def _wire(e: wire.EtaError | None) -> dict[str, Any] | None:
    return None if e is None else e.to_wire()


def test_a_grants_error_is_the_first_eta_against_the_rounded_wait() -> None:
    assert wait_seconds(T0, T0 + 12.34567) == 12.346
    assert wait_seconds(T0 + 1, T0) == 0.0  # never negative
    assert grant_error(300.0, T0, T0 + 12.34567) == 287.654
    assert grant_error(0.0, T0, T0 + 40.0) == 40.0  # told now, waited 40 s
    assert grant_error(500.0, T0, T0 + 500.0004) == 0.0


@pytest.mark.parametrize("n", [1, 2, 3, 9, 10, 11, 99, 100])
def test_nearest_rank_is_the_ceiling_rank(n: int) -> None:
    assert nearest_rank(n, 50) == math.ceil(n * 0.5) - 1
    assert nearest_rank(n, 90) == math.ceil(n * 0.9) - 1


def test_the_summary_is_null_until_the_first_grant_then_median_and_p90() -> None:
    e = EtaErrors()
    assert e.summary() is None
    e.add(4.0)
    assert _wire(e.summary()) == {"grants": 1, "medianSeconds": 4.0, "p90Seconds": 4.0}
    for x in (1.0, 3.0, 2.0):
        e.add(x)
    # sorted 1, 2, 3, 4: the 2nd and the 4th
    assert _wire(e.summary()) == {"grants": 4, "medianSeconds": 2.0, "p90Seconds": 4.0}


def test_the_window_keeps_the_last_grants_and_matches_a_full_sort() -> None:
    rng = random.Random(7)
    e = EtaErrors()
    seen: list[float] = []
    for _ in range(350):
        x = round(rng.choice([0.0, rng.uniform(0, 900)]), 3)  # many ties at 0
        e.add(x)
        seen.append(x)
        assert _wire(e.summary()) == _by_rank(seen[-ETA_ERROR_GRANTS:])
    assert e.recent() == seen[-ETA_ERROR_GRANTS:]
    assert EtaErrors(seen).recent() == e.recent()  # rebuilt from the stored errors


# ---------------------------------------------------------------- in the lane core


def _errors(h: Harness) -> list[float]:
    """Each granted ticket's error, by fence, from the tickets the core wrote."""
    granted = sorted(
        (t for t in h.tickets.values() if t.fence is not None), key=lambda t: t.fence or 0
    )
    out = []
    for t in granted:
        assert t.eta_first_seconds is not None and t.held_at is not None
        out.append(grant_error(t.eta_first_seconds, t.enqueued_at, t.held_at))
    return out


def _status(h: Harness) -> dict[str, Any]:
    out: dict[str, Any] = h.core.status(h.now, 200).to_wire()
    return out


def test_the_first_eta_is_the_acquires_answer_and_every_grant_counts() -> None:
    h = Harness(1, hold=300.0)
    assert _status(h)["etaError"] is None
    a = h.tid("p1")
    assert h.t(a).eta_first_seconds == 0.0  # granted at once: given 0
    assert _status(h)["etaError"] == {"grants": 1, "medianSeconds": 0.0, "p90Seconds": 0.0}
    h.later(100)
    b_reply = h.acquire("p2")
    b = b_reply["ticket"]["ticketId"]
    assert b_reply["ticket"]["etaSeconds"] == 200.0  # the default hold, 100 s of it gone
    assert h.t(b).eta_first_seconds == 200.0
    h.later(50)
    # a duplicate acquire answers the ETA now; the first one stays on record
    dup = h.acquire("p2", h.t(b).scene)
    assert dup["duplicate"] and dup["ticket"]["etaSeconds"] == 150.0
    assert h.t(b).eta_first_seconds == 200.0
    h.later(250)
    h.release(a)  # b waited 300 s after being told 200 s: 100 s off
    assert h.t(b).state is TicketState.HELD
    assert _status(h)["etaError"] == {"grants": 2, "medianSeconds": 0.0, "p90Seconds": 100.0}
    row = history_row(h.t(a))
    assert (row.eta_first_seconds, row.wait_seconds) == (0.0, 0.0)
    h.later(10)
    h.release(b)
    row = history_row(h.t(b))
    assert (row.eta_first_seconds, row.wait_seconds) == (200.0, 300.0)


def test_a_rebuilt_core_carries_the_window_on() -> None:
    """The window a store loads (the stored tickets' errors, by fence) is the one the core
    kept: a rebuilt core answers the same etaError and keeps counting."""
    h = Harness(2, hold=120.0)
    rng = random.Random(3)
    live: list[str] = []
    for i in range(140):
        live.append(h.tid(f"p{i % 3}"))
        h.later(rng.uniform(5, 90))
        if len(live) > 3 or rng.random() < 0.4:
            h.release(live.pop(0))
    want = _by_rank(_errors(h)[-ETA_ERROR_GRANTS:])
    assert want is not None and want["grants"] == ETA_ERROR_GRANTS
    assert _status(h)["etaError"] == want
    snap = LaneSnapshot(
        live=[h.t(t) for t in live if h.t(t).state in (TicketState.QUEUED, TicketState.HELD)],
        last_fence=h.core.last_fence,
        next_seq=h.core.next_seq,
        recent_eta_errors=_errors(h)[-ETA_ERROR_GRANTS:],
    )
    rebuilt = LaneCore(LANE, make_settings(2, hold=120.0), snap, h.now)
    assert _wire(rebuilt.status(h.now, 200).eta_error) == want
    assert rebuilt.eta_errors.recent() == h.core.eta_errors.recent()


def test_a_ticket_with_no_recorded_first_eta_counts_in_no_error() -> None:
    """A queued ticket of a lane file from before the record (eta_first_seconds null) is
    granted like any other and leaves the window as it was."""
    h = Harness(1)
    a = h.tid("p1")
    b = h.tid("p2")
    h.t(b).eta_first_seconds = None  # as an upgraded file loads it
    h.later(30)
    h.release(a)
    assert h.t(b).state is TicketState.HELD
    assert _status(h)["etaError"] == {"grants": 1, "medianSeconds": 0.0, "p90Seconds": 0.0}
