"""The protocol package (coordinator/protocol): one definition of the wire, which the server's
own enums, error classes and constants agree with, and which decodes the way a client needs."""

from __future__ import annotations

from typing import Annotated, Any, get_args

import msgspec
import pytest

from client import errors as client_errors
from coordinator import constants as server_constants
from coordinator import errors as server_errors
from coordinator.engine import model
from coordinator.protocol import constants as C
from coordinator.protocol import errors as E
from coordinator.protocol import names, receipts
from coordinator.protocol import replies as wire
from coordinator.protocol import requests as S


def test_core_enums_are_the_protocol_literals() -> None:
    assert {s.value for s in model.TicketState} == set(get_args(wire.TicketState))
    assert {o.value for o in model.Outcome} == set(get_args(wire.Outcome))
    assert get_args(wire.ReleaseOutcome) == model.RELEASE_OUTCOMES
    assert tuple(p.value for p in model.ReceiptPhase) == get_args(wire.ReceiptPhase)
    assert {k.value for k in model.IncidentKind} == set(get_args(wire.IncidentKind))
    assert get_args(wire.CooldownReason) == C.COOLDOWN_REASONS
    assert set(get_args(wire.CoordinatorKind)) == {C.ACTOR_SQLITE, C.ACTOR_POSTGRES, C.LOCAL_SQLITE}
    reconciled = {
        f"reconciled:{o}" for o in {*model.RECONCILE_OUTCOMES, *model.IN_FLIGHT_TERMINAL_OUTCOMES}
    }
    assert set(get_args(wire.InFlightEnd)) == {"receipt", "expired", *reconciled}
    assert get_args(S.ProtocolVersion) == C.SUPPORTED_PROTOCOLS == (C.PROTOCOL_VERSION,)


def test_one_error_class_per_code_on_both_sides() -> None:
    codes = set(get_args(wire.ErrorCode))
    assert {cls.code for cls in E.ERRORS} == codes == set(E.BY_CODE)
    assert set(client_errors.BY_CODE) == codes
    for cls in E.ERRORS:  # one import path per name: not re-exported by coordinator.errors
        assert not hasattr(server_errors, cls.__name__) or cls is E.Unavailable, cls
    assert issubclass(server_errors.StoreError, E.Unavailable)
    body = msgspec.json.encode(E.UnsupportedProtocol("v", supported=[1]).reply("actor-sqlite"))
    assert msgspec.json.decode(body) == {
        "coordinator": "actor-sqlite",
        "error": {"code": "unsupported-protocol", "message": "v", "supported": [1]},
    }
    assert msgspec.json.decode(msgspec.json.encode(E.NotFound("x").reply())) == {
        "error": {"code": "not-found", "message": "x"}
    }


def test_server_constants_do_not_reexport_the_protocol_ones() -> None:
    protocol = {name for name in dir(C) if name.isupper()}
    # only the two the server's own constants are computed from
    assert protocol & set(dir(server_constants)) == {"ACTOR_SQLITE", "MAX_AWAIT_SECONDS"}
    assert server_constants.COORDINATOR_KIND == C.ACTOR_SQLITE in C.SHARED_KINDS


def test_overview_lane_carries_the_status_fields() -> None:
    status = {f.encode_name for f in msgspec.structs.fields(wire.StatusReply)}
    lane = {f.encode_name for f in msgspec.structs.fields(wire.OverviewLane)}
    assert status - {"coordinator", "recentReceipts"} <= lane


def test_replies_decode_leniently() -> None:
    """Unknown fields are ignored and fields with defaults may be missing; a missing required
    field or a wrong type is an error."""
    data = {
        "coordinator": "actor-postgres",
        "lane": "a:b",
        "enforced": True,
        "granted": False,
        "owner": {"machineId": "m"},
        "ticket": {
            "ticketId": "t_1",
            "lane": "a:b",
            "state": "queued",
            "machineId": "m",
            "project": "p",
            "scene": "s",
            "promptHash": "h",
            "enqueuedAt": 1.0,
            "future": 1,
        },
        "later": {"x": 1},
    }
    r = msgspec.convert(data, wire.LaneReply)
    assert (r.ticket_id, r.state, r.duplicate, r.pause, r.owner.claim_id) == (
        "t_1",
        "queued",
        False,
        None,
        None,
    )
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({**data, "granted": "no"}, wire.LaneReply)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({k: v for k, v in data.items() if k != "coordinator"}, wire.LaneReply)


def test_status_receipts_key_only_when_read() -> None:
    st = wire.StatusReply(
        coordinator="c", lane="a:b", enforced=True, held=[], queued=[], queued_total=0, now=1.0
    )
    assert "recentReceipts" not in msgspec.json.decode(msgspec.json.encode(st))
    assert st.recent_receipts is None and st.unreadable_receipts is None
    st.recent_receipts, st.unreadable_receipts = [], 0
    assert msgspec.json.decode(msgspec.json.encode(st))["recentReceipts"] == []
    assert st.to_wire()["unreadableReceipts"] == 0  # the client's view, not the wire


def test_receipt_reply_client_fields_stay_off_the_wire() -> None:
    r = wire.ReceiptReply(coordinator="c", stored=True, replay=False, content_hash_verified=True)
    r.receipt_id, r.content_hash, r.http_status = "t:lease-acquired:00", "sha256:00", 201
    assert msgspec.json.decode(msgspec.json.encode(r)) == {
        "coordinator": "c",
        "stored": True,
        "replay": False,
        "contentHashVerified": True,
    }
    assert r.to_wire()["httpStatus"] == 201 and r.to_wire()["receiptId"] == "t:lease-acquired:00"


def test_integral_numbers_are_integers_in_requests() -> None:
    body = {"protocolVersion": 1.0, "lane": "a:b", "limit": 100.0}
    parsed = S.convert(body, S.HistoryBody)
    assert (parsed.protocol_version, parsed.limit) == (1, 100)
    with pytest.raises(msgspec.ValidationError):
        S.convert({"protocolVersion": 1, "lane": "a:b", "limit": 1.5}, S.HistoryBody)
    with pytest.raises(msgspec.ValidationError):
        S.convert({"protocolVersion": 2, "lane": "a:b"}, S.HistoryBody)


def test_validate_names_the_field_in_its_message() -> None:
    ok = S.validate({"protocolVersion": 1, "lane": "a:b", "limit": 100.0}, S.HistoryBody)
    assert ok.limit == 100
    cases: list[tuple[dict[str, Any], str]] = [
        ({"protocolVersion": 1, "lane": "a:b", "limit": 0}, "limit: Expected `int` >= 1"),
        ({"protocolVersion": 1}, "lane: required"),
        ({"protocolVersion": 1, "lane": "Nope"}, "lane: must be route:account"),
    ]
    for body, start in cases:
        with pytest.raises(E.BadRequest) as info:
            S.validate(body, S.HistoryBody)
        assert info.value.message.startswith(start), info.value.message


def test_ticket_ids_are_random_url_safe_capabilities() -> None:
    a, b = names.new_ticket_id(), names.new_ticket_id()
    assert a != b and a.startswith("t_") and len(a) == 2 + 22
    assert msgspec.json.decode(msgspec.json.encode(a)) == a


# Every pattern the document publishes, with a value it matches.
PUBLISHED_PATTERNS = {
    "lane": (names.LANE_PATTERN, "demo:main"),
    "part": (names.PART_PATTERN, "demo"),
    "machine": (names.MACHINE_PATTERN, "studio-a"),
    "hash": (receipts.HASH_PATTERN, "sha256:" + "0" * 64),
    "receiptId": (receipts.RECEIPT_ID_PATTERN, "t_1:lease-acquired:" + "0" * 16),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PATTERNS))
def test_published_patterns_refuse_a_trailing_newline_as_msgspec_reads_them(name: str) -> None:
    """msgspec validates a pattern with re.search, where a bare `$` also matches before a
    trailing newline: the patterns end in `$(?!\\n)` (the end in Python and in ECMA-262, the
    dialect JSON Schema tools use; `\\Z` is Python only), so the server stays as strict."""
    pattern, good = PUBLISHED_PATTERNS[name]
    assert "\\Z" not in pattern and pattern.startswith("^") and pattern.endswith(names.END)
    checked = Annotated[str, msgspec.Meta(pattern=pattern)]
    assert msgspec.convert(good, checked) == good
    leading = [] if name == "receiptId" else ["\n" + good]  # its ticket part may hold any
    for bad in (good + "\n", good + "\r\n", good + "\nx", *leading):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(bad, checked)
    bare = pattern.removesuffix(names.END) + "$"  # what `$` alone would let through
    assert msgspec.convert(good + "\n", Annotated[str, msgspec.Meta(pattern=bare)])


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("machineId", "mA\n"),
        ("lane", "solo:main\n"),
        ("contentHash", "sha256:" + "0" * 64 + "\n"),
        ("receiptId", "t_1:lease-acquired:" + "0" * 16 + "\n"),
    ],
)
def test_a_trailing_newline_is_refused_in_a_body(field: str, value: str) -> None:
    body: dict[str, Any] = {
        "protocolVersion": 1,
        "lane": "solo:main",
        "machineId": "mA",
        "ticketId": "t_1",
        "receiptId": "t_1:lease-acquired:" + "0" * 16,
        "phase": "lease-acquired",
        "payload": {},
        "contentHash": "sha256:" + "0" * 64,
    }
    S.validate(dict(body), S.ReceiptBody)  # valid as it is
    with pytest.raises(E.BadRequest) as exc:
        body[field] = value
        parsed = S.validate(body, S.ReceiptBody)
        receipts.check_receipt_id(parsed.receipt_id, parsed.ticket_id, parsed.phase)
    assert field in exc.value.message
