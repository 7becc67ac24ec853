"""Receipt ids and content hashes: RFC 8785 (JCS) canonical JSON, sha256.

Both sides compute these: the client to name and hash what it sends, the server to check the
id's shape and recompute the hash. The one third-party dependency of the protocol package
besides msgspec is `rfc8785` (the canonical form is part of the protocol).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, get_args

import msgspec
import rfc8785

from coordinator.protocol.constants import MAX_JSON_DEPTH
from coordinator.protocol.errors import BadRequest
from coordinator.protocol.json_value import MAX_JSON_NUMBER
from coordinator.protocol.names import END
from coordinator.protocol.replies import ReceiptPhase

HASH_PATTERN = rf"^sha256:[0-9a-f]{{64}}{END}"
HASH_RE = re.compile(HASH_PATTERN)
# The ticket part is everything before the last two parts (a ticket id may hold any character).
RECEIPT_ID_PATTERN = rf"^[\s\S]+:[a-z-]+:[0-9a-f]{{16}}{END}"
RECEIPT_ID_RE = re.compile(
    r"^(?P<ticket>.+):(?P<phase>[a-z-]+):(?P<prefix>[0-9a-f]{16})\Z", re.DOTALL
)
PHASES: tuple[str, ...] = get_args(ReceiptPhase)


# What a reply shows instead of a stored payload it cannot show: one nested deeper than
# MAX_JSON_DEPTH (stored before the bound existed) or not a JSON object at all.
PAYLOAD_OMITTED_KEY = "omitted"
PAYLOAD_TOO_DEEP = f"the stored payload is nested deeper than {MAX_JSON_DEPTH} levels"


_CONTAINERS = (dict, list)


def walk_json(body: dict[str, Any], limit: int = MAX_JSON_DEPTH) -> tuple[int, int, str | None]:
    """One pass over a decoded JSON object, without recursion (any depth is safe).

    Returns (object keys, ':' characters inside strings, keys and values), both counted over
    every level, and the first top-level key whose value nests deeper than `limit` levels (a
    container value is level 1), else None. The counts let a caller see cheaply that the raw
    text had no duplicate key (see `requests.decode_body`)."""
    keys = len(body)
    colons = 0
    stack: list[tuple[Any, int, str]] = []
    for key, value in body.items():  # the top level inline: most bodies have nothing deeper
        if type(key) is str and ":" in key:
            colons += key.count(":")
        if type(value) is str:
            if ":" in value:
                colons += value.count(":")
        elif isinstance(value, _CONTAINERS):
            stack.append((value, 1, key))
    while stack:
        value, depth, top = stack.pop()
        if depth > limit:
            return keys, colons, top
        items: Any
        if isinstance(value, dict):
            keys += len(value)
            for k in value:
                if type(k) is str:  # canonical_json's caller may pass any Python key (400 later)
                    colons += k.count(":")
            items = value.values()
        else:
            items = value
        for item in items:
            if isinstance(item, str):
                colons += item.count(":")
            elif isinstance(item, _CONTAINERS):
                stack.append((item, depth + 1, top))
    return keys, colons, None


def check_payload_depth(payload: Any) -> None:
    """400 naming the payload when it nests deeper than MAX_JSON_DEPTH levels."""
    if walk_json({"payload": payload})[2] is not None:
        raise BadRequest(f"payload: nested deeper than {MAX_JSON_DEPTH} levels")


def stored_payload(payload_json: str) -> dict[str, Any]:
    """A stored payload as a reply shows it. Never raises: a payload nested deeper than
    MAX_JSON_DEPTH (written before the bound existed) or one that is not a JSON object reads
    back as `{"omitted": "<why>"}`, so a status or evidence read never fails on it."""
    try:
        payload = msgspec.json.decode(payload_json)
    except RecursionError:  # msgspec gives up around 1000 levels
        return {PAYLOAD_OMITTED_KEY: PAYLOAD_TOO_DEEP}
    except msgspec.DecodeError:
        return {PAYLOAD_OMITTED_KEY: "the stored payload is not valid JSON"}
    if not isinstance(payload, dict):
        return {PAYLOAD_OMITTED_KEY: "the stored payload is not a JSON object"}
    if walk_json({"payload": payload})[2] is not None:
        return {PAYLOAD_OMITTED_KEY: PAYLOAD_TOO_DEEP}
    return payload


_SAFE_INTEGER = 2**53 - 1
_MAX_INTEGRAL_DOUBLE = int(MAX_JSON_NUMBER)


def _as_double(value: int) -> float:
    """An integer beyond ±(2^53−1) as RFC 8785 reads it: the IEEE 754 double nearest to it
    (`10**21` is `1e21`, so it canonicalizes as `1e+21` like the literal `1e21`); 400 beyond
    the double range, like `1e400`."""
    if abs(value) > _MAX_INTEGRAL_DOUBLE:
        raise BadRequest("payload: a number is beyond the IEEE 754 double range (RFC 8785)")
    return float(value)


def _doubles(value: Any) -> Any:
    """`value` with every integer beyond ±(2^53−1) as its double (the depth is bounded by
    check_payload_depth first)."""
    if type(value) is int:
        return value if -_SAFE_INTEGER <= value <= _SAFE_INTEGER else _as_double(value)
    if isinstance(value, dict):
        return {k: _doubles(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_doubles(v) for v in value]
    return value


def canonical_json(payload: Any) -> bytes:
    """RFC 8785 canonical bytes, or 400 naming why the payload cannot be canonicalized (one
    nested deeper than MAX_JSON_DEPTH levels included). Every number is an IEEE 754 double,
    however it is written (docs/protocol.md#receipts): an integer beyond ±(2^53−1) is the
    double nearest to it, one beyond the double range is 400."""
    check_payload_depth(payload)
    try:
        return bytes(rfc8785.dumps(_doubles(payload)))
    except rfc8785.IntegerDomainError as exc:  # _doubles leaves none (a bool subclass?)
        raise BadRequest("payload: cannot be canonicalized as RFC 8785 JSON") from exc
    except rfc8785.FloatDomainError as exc:
        raise BadRequest("payload: a number is not finite (RFC 8785 has no NaN/Infinity)") from exc
    except rfc8785.CanonicalizationError as exc:
        raise BadRequest("payload: cannot be canonicalized as RFC 8785 JSON") from exc
    except RecursionError:
        raise BadRequest("payload: nested too deeply to canonicalize") from None


def content_hash(canonical: bytes) -> str:
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def receipt_id_for(ticket_id: str, phase: str, hash_: str) -> str:
    return f"{ticket_id}:{phase}:{hash_.removeprefix('sha256:')[:16]}"


def check_receipt_id(receipt_id: str, ticket_id: str, phase: str) -> None:
    """The id's shape must be <ticketId>:<phase>:<16 hex>, naming the body's ticket and phase."""
    m = RECEIPT_ID_RE.fullmatch(receipt_id)
    if m is None:
        raise BadRequest("receiptId: must be <ticketId>:<phase>:<first 16 hex of the hash>")
    if m.group("ticket") != ticket_id:
        raise BadRequest("receiptId: its ticket part must equal ticketId")
    if m.group("phase") != phase:
        raise BadRequest("receiptId: its phase part must equal phase")
