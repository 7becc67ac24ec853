"""Query parameters (msgspec Structs), one per GET read that takes any, and `decode_query`,
the one place a query string becomes its Struct. camelCase on the wire; unknown parameters
are ignored, like unknown body fields. `/openapi.json` documents each read's parameters
from these Structs (their bounds, defaults, patterns and descriptions).

A query string is text, so `decode_query` reads it by the Struct's own types and bounds,
field by field in the order the Struct declares them (with several bad parameters, the first
one is named), and answers 400 bad-request naming the parameter:
- a required one absent or empty: "lane: required query parameter";
- an integer absent or empty (`limit=`) takes its default; otherwise `int()` of the text,
  within the field's bounds: "limit: must be an integer", "limit: must be between 1 and 1000";
- a lane, once given (even empty), must be a lane name (`names.parse_lane`, the lane rule);
- any other string absent takes its default; empty, the default too when the field allows
  an empty value, else "project: empty; leave it out for every project"; over its length:
  "project: at most 128 characters".
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal, TypeVar

import msgspec
from msgspec import Meta

from coordinator.protocol import constants as C
from coordinator.protocol.errors import BadRequest
from coordinator.protocol.names import LANE_PATTERN, parse_lane
from coordinator.protocol.requests import EXAMPLE_LANE

# A lane parameter: checked by `parse_lane` (its message is the lane rule) before the Struct
# is built, and by the pattern again when it is.
LaneParam = Annotated[
    str,
    Meta(
        min_length=3,
        max_length=C.MAX_LANE_CHARS,
        pattern=LANE_PATTERN,
        examples=[EXAMPLE_LANE],
    ),
]


class Params(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    """The query parameters of one GET read."""


class IncidentsParams(Params, kw_only=True, frozen=True):
    """GET /v1/incidents."""

    lane: (
        Annotated[LaneParam, Meta(description="one lane (route:account); all when absent")] | None
    ) = None
    limit: Annotated[
        int, Meta(ge=1, le=C.MAX_INCIDENTS_LIMIT, description="at most this many rows")
    ] = C.DEFAULT_INCIDENTS_LIMIT


class EvidenceParams(Params, kw_only=True, frozen=True):
    """GET /v1/evidence."""

    lane: Annotated[LaneParam, Meta(description="the lane (route:account)")]
    # Not bounded: an id the coordinator never issued reads "unknown" (found: false).
    ticket_id: (
        Annotated[str, Meta(description="the exact ticket; absent or empty: none")] | None
    ) = None


class OverviewParams(Params, kw_only=True, frozen=True):
    """GET /v1/overview. `project` comes first: it is the parameter checked first."""

    project: (
        Annotated[
            str,
            Meta(
                min_length=1,
                max_length=C.MAX_IDENTITY_CHARS,
                description="the render log's project filter",
            ),
        ]
        | None
    ) = None
    history: Annotated[
        int,
        Meta(
            ge=0,
            le=C.OVERVIEW_MAX_HISTORY,
            description="render-log rows per lane, newest first (the timeline)",
        ),
    ] = C.OVERVIEW_DEFAULT_HISTORY
    queued: Annotated[
        int,
        Meta(
            ge=0,
            le=C.STATUS_QUEUED_LIMIT,
            description="queued tickets listed per lane, in promotion order (queuedTotal "
            "counts all)",
        ),
    ] = C.OVERVIEW_DEFAULT_QUEUED
    receipts: Annotated[
        int,
        Meta(
            ge=0,
            le=C.RECENT_RECEIPTS_LIMIT,
            description="newest receipts per lane, without payload; receiptMismatches lists "
            f"every mismatch among the lane's newest {C.RECENT_RECEIPTS_LIMIT} anyway",
        ),
    ] = C.OVERVIEW_DEFAULT_RECEIPTS
    incidents: Annotated[
        int,
        Meta(ge=1, le=C.MAX_INCIDENTS_LIMIT, description="incidents of every lane, newest first"),
    ] = C.DEFAULT_INCIDENTS_LIMIT
    lane: (
        Annotated[LaneParam, Meta(description="the render log's lane; every lane when absent")]
        | None
    ) = None
    limit: Annotated[
        int,
        Meta(
            ge=1,
            le=C.OVERVIEW_MAX_LOG_LIMIT,
            description="render-log rows in all (log.entries), newest first",
        ),
    ] = C.OVERVIEW_DEFAULT_LOG_LIMIT


P = TypeVar("P", bound=Params)


@dataclass(frozen=True)
class _Rule:
    """How one parameter is read: its wire name, kind, and bounds (integer: the value's;
    string: the length's)."""

    name: str
    kind: Literal["int", "lane", "str"]
    required: bool
    lo: int | None
    hi: int | None


_ABSENT = object()  # the parameter takes the Struct's default


def _rule(field: msgspec.inspect.Field) -> _Rule:
    t = field.type
    if isinstance(t, msgspec.inspect.UnionType):  # `X | None = None`
        [t] = [x for x in t.types if not isinstance(x, msgspec.inspect.NoneType)]
    if isinstance(t, msgspec.inspect.Metadata):  # a description, examples
        t = t.type
    name, required = field.encode_name, field.required
    if isinstance(t, msgspec.inspect.IntType):
        if t.ge is None or t.le is None:
            raise TypeError(f"{name}: an integer parameter needs both bounds")
        return _Rule(name, "int", required, t.ge, t.le)
    if isinstance(t, msgspec.inspect.StrType):
        if t.pattern == LANE_PATTERN:
            return _Rule(name, "lane", required, None, None)
        if t.pattern is not None:
            raise TypeError(f"{name}: no message for the pattern {t.pattern!r}")
        return _Rule(name, "str", required, t.min_length, t.max_length)
    raise TypeError(f"{name}: a query parameter is an integer or a string, not {t!r}")


@functools.cache
def rules(schema: type[Params]) -> tuple[_Rule, ...]:
    """The Struct's parameters, in its field order (TypeError for a field no rule reads)."""
    info = msgspec.inspect.type_info(schema)
    assert isinstance(info, msgspec.inspect.StructType)
    return tuple(_rule(f) for f in info.fields)


def _read(rule: _Rule, raw: str | None) -> object:
    """One parameter's value, `_ABSENT` for its default, or 400 naming it."""
    name = rule.name
    if rule.required and not raw:
        raise BadRequest(f"{name}: required query parameter")
    if raw is None:
        return _ABSENT
    if rule.kind == "lane":
        parse_lane(raw)
        return raw
    if rule.kind == "int":
        if raw == "":
            return _ABSENT
        try:
            value = int(raw)
        except ValueError:
            raise BadRequest(f"{name}: must be an integer") from None
        assert rule.lo is not None and rule.hi is not None
        if not rule.lo <= value <= rule.hi:
            raise BadRequest(f"{name}: must be between {rule.lo} and {rule.hi}")
        return value
    if raw == "" and not rule.lo:
        return _ABSENT
    if raw == "":
        raise BadRequest(f"{name}: empty; leave it out for every {name}")
    if rule.lo is not None and len(raw) < rule.lo:
        raise BadRequest(f"{name}: at least {rule.lo} characters")
    if rule.hi is not None and len(raw) > rule.hi:
        raise BadRequest(f"{name}: at most {rule.hi} characters")
    return raw


def decode_query(query: Mapping[str, str], schema: type[P]) -> P:
    """A query string (its first value of each name) as the read's Struct, or 400
    bad-request naming the first bad parameter (see the module's rules)."""
    values: dict[str, object] = {}
    for rule in rules(schema):
        value = _read(rule, query.get(rule.name))
        if value is not _ABSENT:
            values[rule.name] = value
    try:
        return msgspec.convert(values, schema)
    except msgspec.ValidationError as exc:  # the rules above and the Struct disagree
        raise BadRequest(f"query: {exc}") from None
