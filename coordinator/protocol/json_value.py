"""Any JSON value, as the protocol reads one: a receipt payload's values, an incident's detail.

JSON has one number type, and RFC 8785 (the canonical form receipts are hashed in) reads every
number as an IEEE 754 double, as ECMAScript's JSON.parse does: `1e21`, `1E30`, `1.0e16` and the
same values written as integers are the same numbers, and an integer beyond ±(2^53−1) is the
double nearest to it (`receipts.canonical_json` applies that rule). Only a number beyond the
double range (±1.7976931348623157e308) is no double at all: 400 (docs/protocol.md#receipts).

The OpenAPI document publishes `JSON_VALUE_SCHEMA` as the component `JsonValue`; `JsonObject`
is a JSON object whose values are JSON values (its schema says so: a generated client sees
"an object of JSON values", not an empty object).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Final

from msgspec import Meta

MAX_JSON_NUMBER: Final = sys.float_info.max  # the largest finite double
JSON_VALUE_REF: Final = "#/components/schemas/JsonValue"
JSON_VALUE_SCHEMA: Final[dict[str, Any]] = {
    "description": (
        "any JSON value; a number is read as an IEEE 754 double (RFC 8785): integers beyond "
        "±(2^53−1) are the double nearest to them (send a number whose every digit counts as "
        "a string)"
    ),
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "string"},
        {"type": "number", "minimum": -MAX_JSON_NUMBER, "maximum": MAX_JSON_NUMBER},
        {"type": "array", "items": {"$ref": JSON_VALUE_REF}},
        {"type": "object", "additionalProperties": {"$ref": JSON_VALUE_REF}},
    ],
}


# A JSON object of JSON values (add a description with Annotated[JsonObject, Meta(...)]).
JsonObject = Annotated[
    dict[str, Any], Meta(extra_json_schema={"additionalProperties": {"$ref": JSON_VALUE_REF}})
]
