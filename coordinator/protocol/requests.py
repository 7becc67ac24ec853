"""Request bodies (msgspec Structs), one per POST operation. camelCase on the wire; unknown
fields are ignored. The server validates every body with these, and so does the client's local
queue, so both refuse the same input with the same message."""

from __future__ import annotations

import functools
import json
import re
from typing import Annotated, Any, Literal, NoReturn, TypeVar

import msgspec
from msgspec import Meta

from coordinator.protocol import constants as C
from coordinator.protocol.errors import BadRequest
from coordinator.protocol.json_value import JsonObject
from coordinator.protocol.names import LANE_PATTERN, MACHINE_PATTERN, parse_lane
from coordinator.protocol.receipts import HASH_PATTERN, RECEIPT_ID_PATTERN, walk_json
from coordinator.protocol.replies import (
    CooldownReason,
    ReceiptPhase,
    ReconcileOutcome,
    ReleaseOutcome,
)

EXAMPLE_LANE = "demo:main"  # what tools that generate requests from the document use

Identity = Annotated[str, Meta(min_length=1, max_length=C.MAX_IDENTITY_CHARS)]
# The lane's length is checked here; its shape (route:account) by `names.parse_lane`, which
# every caller runs after decoding, so a bad name reads "lane: must be route:account, ...".
Lane = Annotated[
    str,
    Meta(
        min_length=3,
        max_length=C.MAX_LANE_CHARS,
        description="route:account, each 1-64 of [a-z0-9._-] starting with [a-z0-9]",
        examples=[EXAMPLE_LANE],
        extra_json_schema={"pattern": LANE_PATTERN},
    ),
]
MachineId = Annotated[str, Meta(pattern=MACHINE_PATTERN)]
ClaimId = Annotated[str, Meta(min_length=1, max_length=C.MAX_CLAIM_CHARS)]
TicketId = Annotated[str, Meta(min_length=1, max_length=C.MAX_TICKET_ID_CHARS)]
LeaseSeconds = Annotated[float, Meta(ge=C.MIN_LEASE_SECONDS, le=C.MAX_LEASE_SECONDS)]
WaitSeconds = Annotated[float, Meta(ge=C.MIN_AWAIT_SECONDS, le=C.MAX_AWAIT_SECONDS)]
RetryAfter = Annotated[float, Meta(ge=C.MIN_COOLDOWN_SECONDS, le=C.MAX_COOLDOWN_SECONDS)]
ContentHash = Annotated[str, Meta(pattern=HASH_PATTERN)]
ReceiptId = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=C.MAX_RECEIPT_ID_CHARS,
        description="<ticketId>:<phase>:<first 16 hex of the hash>; its ticket and phase "
        "parts must be the body's ticketId and phase (400 otherwise)",
        extra_json_schema={"pattern": RECEIPT_ID_PATTERN},
    ),
]
# A receipt payload is any JSON object (its values: `json_value.JSON_VALUE_SCHEMA`).
Payload = Annotated[
    JsonObject,
    Meta(
        description="a JSON object; its RFC 8785 canonical form at most "
        f"{C.MAX_RECEIPT_PAYLOAD_BYTES} bytes"
    ),
]
HistoryLimit = Annotated[int, Meta(ge=1, le=C.MAX_HISTORY_LIMIT)]
ProviderJobId = Annotated[str, Meta(max_length=C.MAX_PROVIDER_JOB_CHARS)]
Note = Annotated[str, Meta(max_length=C.MAX_NOTE_CHARS)]
# Any other integer is answered 400 unsupported-protocol (with the supported versions).
ProtocolVersion = Literal[1]


class Base(msgspec.Struct, kw_only=True, rename="camel"):
    protocol_version: ProtocolVersion
    lane: Lane


class Mutation(Base, kw_only=True):
    machine_id: MachineId
    claim_id: ClaimId | None = None


class AcquireBody(Mutation, kw_only=True):
    """Acquire a place in the lane for one request identity (project, scene, promptHash)."""

    project: Identity
    scene: Identity
    prompt_hash: Identity
    lease_seconds: LeaseSeconds | None = None


class TicketBody(Mutation, kw_only=True):
    ticket_id: TicketId


class AwaitBody(TicketBody, kw_only=True):
    """Wait (at most waitSeconds) until the ticket is no longer queued or the pause changes."""

    wait_seconds: WaitSeconds = C.DEFAULT_AWAIT_SECONDS


class HeartbeatBody(TicketBody, kw_only=True):
    """Extend a held lease (a queued ticket: keep the waiter alive)."""

    lease_seconds: LeaseSeconds | None = None


class ReleaseBody(TicketBody, kw_only=True):
    """End the ticket with an outcome."""

    outcome: ReleaseOutcome | None = None
    provider_job_id: ProviderJobId | None = None
    note: Note | None = None


class ReconcileBody(TicketBody, kw_only=True):
    """End the in-flight job of an ended ticket: how the provider job ended
    (docs/protocol.md#reconcile)."""

    outcome: ReconcileOutcome
    provider_job_id: ProviderJobId | None = None
    note: Note | None = None


class ReceiptBody(TicketBody, kw_only=True):
    """Record one evidence receipt about the ticket's job (written by its holder machine)."""

    receipt_id: ReceiptId
    phase: ReceiptPhase
    payload: Payload
    content_hash: ContentHash


class CooldownBody(TicketBody, kw_only=True):
    """Pause the lane after a provider human check, reported on the held ticket."""

    reason_code: CooldownReason
    retry_after_seconds: RetryAfter


class StatusBody(Base, kw_only=True):
    """Read the lane's held and queued tickets (machineId only marks the computer as seen)."""

    machine_id: MachineId | None = None
    include_receipts: bool = False


class HistoryBody(Base, kw_only=True):
    """Read the render log, newest first (of one project when given)."""

    limit: HistoryLimit = C.DEFAULT_HISTORY_LIMIT
    project: Identity | None = None
    machine_id: MachineId | None = None


SCHEMAS: dict[str, type[Base]] = {
    "acquire": AcquireBody,
    "await": AwaitBody,
    "heartbeat": HeartbeatBody,
    "release": ReleaseBody,
    "receipt": ReceiptBody,
    "status": StatusBody,
    "history": HistoryBody,
    "cooldown": CooldownBody,
    "reconcile": ReconcileBody,
}


B = TypeVar("B", bound=Base)


@functools.cache
def _integer_fields(schema: type[Base]) -> frozenset[str]:
    """The wire names of the fields whose value is an integer."""
    info = msgspec.inspect.type_info(schema)
    assert isinstance(info, msgspec.inspect.StructType)
    out: set[str] = set()
    for f in info.fields:
        kinds = f.type.types if isinstance(f.type, msgspec.inspect.UnionType) else (f.type,)
        for t in kinds:
            literal_ints = isinstance(t, msgspec.inspect.LiteralType) and all(
                isinstance(v, int) for v in t.values
            )
            if isinstance(t, msgspec.inspect.IntType) or literal_ints:
                out.add(f.encode_name)
    return frozenset(out)


def convert(data: dict[str, Any], schema: type[B]) -> B:
    """A decoded JSON body as its request Struct (raises msgspec.ValidationError).

    JSON has one number type: an integral number is an integer wherever the schema asks for
    one (`"limit": 100.0` is 100, `"protocolVersion": 1.0` is 1), as JSON Schema says."""
    for name in _integer_fields(schema):
        value = data.get(name)
        if isinstance(value, float) and value.is_integer():
            data[name] = int(value)
    return msgspec.convert(data, schema)


def validation_message(text: str) -> str:
    """A msgspec ValidationError as "field: message":
    'Expected `int` >= 15 - at `$.leaseSeconds`' -> 'leaseSeconds: Expected `int` >= 15'."""
    msg, sep, where = text.rpartition(" - at `$.")
    if sep:
        return f"{where.rstrip('`')}: {msg}"
    if text.startswith("Object missing required field") and "`" in text:
        return f"{text.split('`')[1]}: required"
    return text


def validate(data: dict[str, Any], schema: type[B]) -> B:
    """A decoded JSON body as its request Struct, its lane's shape checked; 400 bad-request
    naming the field otherwise. The server and the client's local queue both validate with
    it, so both refuse the same input with the same message."""
    try:
        body = convert(data, schema)
    except msgspec.ValidationError as exc:
        raise BadRequest(validation_message(str(exc))) from None
    parse_lane(body.lane)
    return body


# ---------------------------------------------------------------- raw bodies

_SHOWN_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # a key a message may name as it is


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _duplicate_key(raw: bytes) -> str | None:
    """The first key given twice in one object of `raw` (valid JSON, depth already bounded)."""
    try:
        json.loads(raw, object_pairs_hook=_refuse_duplicates)
    except _DuplicateKey as exc:
        return exc.key
    except (ValueError, RecursionError):  # what msgspec took and json does not (a huge int)
        return None
    return None


def decode_body(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object, or 400 bad-request naming what is wrong: not JSON,
    not an object, a value nested deeper than MAX_JSON_DEPTH levels (named by its top-level
    key), or a key given twice in one object (JSON parsers disagree on which one wins, so
    the protocol refuses it).

    Duplicates cost almost nothing to rule out: msgspec keeps the last of equal keys, so a
    body had none exactly when its ':' outside strings (every ':' in the raw text, less those
    inside decoded strings) number its decoded keys. Only when that count differs, or a
    \\u003a escape could hide a ':', does a second parse look for the key by name."""
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise BadRequest("body: not valid JSON") from None
    except RecursionError:  # msgspec raises it (not DecodeError) around 1000 levels
        _refuse_depth(_too_deep_in_text(raw))
    if not isinstance(data, dict):
        raise BadRequest("body: must be a JSON object")
    keys, colons, too_deep = walk_json(data)
    if too_deep is not None:
        _refuse_depth(too_deep)
    if raw.count(b":") - colons != keys or b"\\u003" in raw:
        dup = _duplicate_key(raw)
        if dup is not None:
            shown = repr(dup) if _SHOWN_KEY.fullmatch(dup) else "a key"
            raise BadRequest(f"body: duplicate key {shown} (each key at most once per object)")
    return data


def _refuse_depth(key: str | None) -> NoReturn:
    where = key if key is not None and _SHOWN_KEY.fullmatch(key) else "body"
    raise BadRequest(f"{where}: nested deeper than {C.MAX_JSON_DEPTH} levels")


_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}:]')
_SCAN_TOKENS = 100_000  # naming the field is a courtesy: a bounded scan


def _too_deep_in_text(raw: bytes) -> str | None:
    """The top-level key whose value nests too deep, from the text (for a body too deep for
    msgspec to decode at all), or None if the scan cannot tell within its bound."""
    depth = 0
    key: str | None = None
    prev = b""
    for n, m in enumerate(_TOKEN.finditer(raw)):
        if n > _SCAN_TOKENS:
            return None
        tok = m.group()
        if tok in (b"{", b"["):
            depth += 1
            if depth > C.MAX_JSON_DEPTH + 1:  # the body itself is one level
                return key
        elif tok in (b"}", b"]"):
            depth -= 1
        elif tok == b":" and depth == 1 and prev[:1] == b'"':
            try:
                key = json.loads(prev)
            except ValueError:
                key = None
        prev = tok
    return None
