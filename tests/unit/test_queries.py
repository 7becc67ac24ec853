"""GET query parameters (coordinator/protocol/queries.py): one Struct per read, decoded in one
place with the messages the reads have always answered, and documented from the same
Structs in /openapi.json."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec import Meta
from multidict import MultiDict, MultiDictProxy

from coordinator.http.openapi import openapi_document
from coordinator.protocol import constants as C
from coordinator.protocol import queries as Q
from coordinator.protocol.errors import BadRequest
from coordinator.protocol.names import LANE_PATTERN, LANE_RULE

READS: dict[str, type[Q.Params]] = {
    "/v1/incidents": Q.IncidentsParams,
    "/v1/evidence": Q.EvidenceParams,
    "/v1/overview": Q.OverviewParams,
}
LANE = "solo:main"


def query(*pairs: tuple[str, str]) -> MultiDictProxy[str]:
    """A query string as aiohttp hands it over (a name may be given more than once)."""
    return MultiDictProxy(MultiDict(pairs))


def refused(schema: type[Q.Params], *pairs: tuple[str, str]) -> str:
    with pytest.raises(BadRequest) as info:
        Q.decode_query(query(*pairs), schema)
    assert info.value.code == "bad-request" and info.value.status == 400
    return info.value.message


def test_absent_parameters_take_the_named_defaults() -> None:
    assert Q.decode_query(query(), Q.IncidentsParams) == Q.IncidentsParams(
        lane=None, limit=C.DEFAULT_INCIDENTS_LIMIT
    )
    assert Q.decode_query(query(), Q.OverviewParams) == Q.OverviewParams(
        project=None,
        history=C.OVERVIEW_DEFAULT_HISTORY,
        queued=C.OVERVIEW_DEFAULT_QUEUED,
        receipts=C.OVERVIEW_DEFAULT_RECEIPTS,
        incidents=C.DEFAULT_INCIDENTS_LIMIT,
        lane=None,
        limit=C.OVERVIEW_DEFAULT_LOG_LIMIT,
    )


def test_empty_integers_take_their_defaults_and_an_empty_ticket_id_is_none() -> None:
    empty = [(n, "") for n in ("history", "queued", "receipts", "incidents", "limit")]
    assert Q.decode_query(query(*empty), Q.OverviewParams) == Q.OverviewParams()
    q = Q.decode_query(query(("lane", LANE), ("ticketId", "")), Q.EvidenceParams)
    assert q == Q.EvidenceParams(lane=LANE, ticket_id=None)


def test_given_values_are_read() -> None:
    q1 = Q.decode_query(query(("lane", LANE), ("limit", "7")), Q.IncidentsParams)
    assert q1 == Q.IncidentsParams(lane=LANE, limit=7)
    q = Q.decode_query(
        query(
            ("project", "p" * C.MAX_IDENTITY_CHARS),
            ("history", "0"),
            ("queued", str(C.STATUS_QUEUED_LIMIT)),
            ("receipts", "0"),
            ("incidents", str(C.MAX_INCIDENTS_LIMIT)),
            ("lane", LANE),
            ("limit", str(C.OVERVIEW_MAX_LOG_LIMIT)),
        ),
        Q.OverviewParams,
    )
    assert (q.project, q.history, q.queued, q.receipts, q.incidents, q.lane, q.limit) == (
        "p" * C.MAX_IDENTITY_CHARS,
        0,
        C.STATUS_QUEUED_LIMIT,
        0,
        C.MAX_INCIDENTS_LIMIT,
        LANE,
        C.OVERVIEW_MAX_LOG_LIMIT,
    )
    q2 = Q.decode_query(query(("lane", LANE), ("ticketId", "t_x")), Q.EvidenceParams)
    assert q2.ticket_id == "t_x"


def test_integers_are_read_as_python_int_reads_text() -> None:
    """What `int()` took before is taken still (signs, spaces, underscores, other digits)."""
    for raw, value in (("+5", 5), (" 7 ", 7), ("1_0", 10), ("１２", 12), ("0010", 10)):
        assert Q.decode_query(query(("limit", raw)), Q.IncidentsParams).limit == value


def test_unknown_parameters_are_ignored_and_the_first_value_counts() -> None:
    q = Q.decode_query(
        query(("limit", "3"), ("limit", "x"), ("Lane", "bad"), ("other", "1")), Q.IncidentsParams
    )
    assert q == Q.IncidentsParams(limit=3)


BETWEEN = "{}: must be between {} and {}"


@pytest.mark.parametrize(
    ("schema", "pairs", "message"),
    [
        (Q.IncidentsParams, [("limit", "0")], BETWEEN.format("limit", 1, C.MAX_INCIDENTS_LIMIT)),
        (Q.IncidentsParams, [("limit", "100000")], BETWEEN.format("limit", 1, 1000)),
        (Q.IncidentsParams, [("limit", "x")], "limit: must be an integer"),
        (Q.IncidentsParams, [("limit", "1e3")], "limit: must be an integer"),
        (Q.IncidentsParams, [("limit", "9" * 5000)], "limit: must be an integer"),
        (Q.IncidentsParams, [("lane", "")], LANE_RULE),
        (Q.IncidentsParams, [("lane", "solo")], LANE_RULE),
        (Q.IncidentsParams, [("lane", "../etc:passwd")], LANE_RULE),
        (Q.IncidentsParams, [("lane", "solo:main\n")], LANE_RULE),
        (Q.EvidenceParams, [], "lane: required query parameter"),
        (Q.EvidenceParams, [("lane", "")], "lane: required query parameter"),
        (Q.EvidenceParams, [("ticketId", "t_x")], "lane: required query parameter"),
        (Q.EvidenceParams, [("lane", "a/b:c")], LANE_RULE),
        (Q.EvidenceParams, [("lane", "a" * 65 + ":b")], LANE_RULE),
        (Q.OverviewParams, [("project", "")], "project: empty; leave it out for every project"),
        (Q.OverviewParams, [("project", "p" * 129)], "project: at most 128 characters"),
        (Q.OverviewParams, [("history", "201")], BETWEEN.format("history", 0, 200)),
        (Q.OverviewParams, [("history", "-1")], BETWEEN.format("history", 0, 200)),
        (Q.OverviewParams, [("queued", "201")], BETWEEN.format("queued", 0, 200)),
        (Q.OverviewParams, [("receipts", "51")], BETWEEN.format("receipts", 0, 50)),
        (Q.OverviewParams, [("incidents", "0")], BETWEEN.format("incidents", 1, 1000)),
        (Q.OverviewParams, [("limit", "0")], BETWEEN.format("limit", 1, 500)),
        (Q.OverviewParams, [("limit", "501")], BETWEEN.format("limit", 1, 500)),
        (Q.OverviewParams, [("limit", "1.0")], "limit: must be an integer"),
        (Q.OverviewParams, [("lane", "")], LANE_RULE),
        (Q.OverviewParams, [("lane", "../etc:passwd")], LANE_RULE),
    ],
)
def test_bad_parameters_give_the_messages_the_reads_always_gave(
    schema: type[Q.Params], pairs: list[tuple[str, str]], message: str
) -> None:
    assert refused(schema, *pairs) == message


def test_the_first_bad_parameter_is_the_one_named() -> None:
    """The order the reads always checked them in: the Struct's field order."""
    assert refused(Q.IncidentsParams, ("limit", "0"), ("lane", "x")) == LANE_RULE
    assert refused(Q.EvidenceParams, ("lane", "x")) == LANE_RULE
    assert refused(Q.OverviewParams, ("limit", "0"), ("history", "x"), ("project", "")) == (
        "project: empty; leave it out for every project"
    )
    assert refused(Q.OverviewParams, ("limit", "0"), ("lane", "x"), ("incidents", "x")) == (
        "incidents: must be an integer"
    )
    assert refused(Q.OverviewParams, ("limit", "0"), ("lane", "x")) == LANE_RULE


VALUES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        ["", "0", "1", "-1", "200", "1001", "１２", LANE, "demo:main", "a:b", "p" * 129]
    ),
)
NAMES = st.sampled_from(
    ["lane", "limit", "ticketId", "project", "history", "queued", "receipts", "incidents", "x"]
)


@given(
    schema=st.sampled_from(list(READS.values())),
    pairs=st.lists(st.tuples(NAMES, VALUES), max_size=6),
)
def test_any_query_is_its_struct_or_a_bad_request_naming_a_parameter(
    schema: type[Q.Params], pairs: list[tuple[str, str]]
) -> None:
    """The decoder's rules and the Struct's own constraints agree: what the rules let
    through, msgspec builds (never the fallback message), and each refusal names one of the
    read's parameters."""
    try:
        q = Q.decode_query(query(*pairs), schema)
    except BadRequest as exc:
        assert exc.message.split(":", 1)[0] in {r.name for r in Q.rules(schema)}, exc.message
        return
    again = msgspec.convert(msgspec.to_builtins(q), schema)  # every constraint holds
    assert again == q


def test_a_field_no_rule_reads_is_refused_when_the_struct_is_first_used() -> None:
    class Floaty(Q.Params, kw_only=True, frozen=True):
        ratio: float = 1.0

    class Unbounded(Q.Params, kw_only=True, frozen=True):
        n: int = 1

    class Patterned(Q.Params, kw_only=True, frozen=True):
        name: Annotated[str, Meta(pattern="^x")] | None = None

    for schema in (Floaty, Unbounded, Patterned):
        with pytest.raises(TypeError):
            Q.rules(schema)


def test_other_string_bounds_have_their_messages() -> None:
    class Named(Q.Params, kw_only=True, frozen=True):
        name: Annotated[str, Meta(min_length=3, max_length=5)] | None = None

    assert refused(Named, ("name", "ab")) == "name: at least 3 characters"
    assert refused(Named, ("name", "")) == "name: empty; leave it out for every name"
    assert refused(Named, ("name", "abcdef")) == "name: at most 5 characters"
    assert Q.decode_query(query(("name", "abc")), Named) == Named(name="abc")


def _documented(path: str) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = openapi_document()["paths"][path]["get"]["parameters"]
    return params


@pytest.mark.parametrize("path", sorted(READS))
def test_the_document_lists_each_structs_parameters(path: str) -> None:
    """Names, order, required, bounds and defaults of /openapi.json's parameters are the
    Struct's; an integer's empty value is allowed and named in its description."""
    schema = READS[path]
    params = _documented(path)
    fields = msgspec.structs.fields(schema)
    assert [p["name"] for p in params] == [f.encode_name for f in fields]
    for p, f, rule in zip(params, fields, Q.rules(schema), strict=True):
        assert p["in"] == "query" and p["required"] == f.required and p["description"]
        s = p["schema"]
        if rule.kind == "int":
            assert (s["type"], s["minimum"], s["maximum"]) == ("integer", rule.lo, rule.hi)
            assert s["default"] == f.default and p["allowEmptyValue"] is True
            assert p["description"].endswith(f"(empty: {f.default})")
        else:
            assert s["type"] == "string" and "default" not in s and "anyOf" not in s
        if rule.kind == "lane":
            assert s["pattern"] == LANE_PATTERN and s["examples"] == ["demo:main"]
            assert (s["minLength"], s["maxLength"]) == (3, C.MAX_LANE_CHARS)
        if rule.kind == "str":
            assert (s.get("minLength"), s.get("maxLength")) == (rule.lo, rule.hi)


def test_reads_without_a_query_document_no_parameters() -> None:
    for path in ("/v1/lanes", "/v1/machines", "/v1/dashboard"):
        assert _documented(path) == []
