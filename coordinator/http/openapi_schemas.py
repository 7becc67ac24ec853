"""The OpenAPI document's component schemas: msgspec's JSON Schema of the protocol Structs, with
what the Structs cannot say themselves.

- `required`: replies decode leniently (a field with a default may be missing), but this server
  always sends every field that is not UNSET, so the document lists them all as required.
- `coordinator` (every /v1 reply and error): the Struct reads any string, so that a client can
  name the kind of coordinator it refuses; what a coordinator sends is one of
  `CoordinatorKind`, an enum here.
- `Incident`: one schema per kind (`<Kind>Incident`, its `kind` a constant and its `detail` the
  kind's Struct from `coordinator.protocol.incident_details`), the Incident a oneOf of them.
- `JsonValue`: any JSON value (`coordinator.protocol.json_value`), what a receipt payload and
  an incident detail hold.

`OVERRIDDEN` names the components that are not msgspec's schema as it is (tests/ops/
test_openapi.py compares every other one with msgspec's).
"""

from __future__ import annotations

import copy
from typing import Any, Final, get_args

import msgspec
from msgspec import UNSET

from coordinator.protocol import replies as wire
from coordinator.protocol import requests as S
from coordinator.protocol.incident_details import DETAILS
from coordinator.protocol.json_value import JSON_VALUE_REF, JSON_VALUE_SCHEMA

REF: Final = "#/components/schemas/{name}"
COORDINATOR_KINDS: Final = list(get_args(wire.CoordinatorKind))


def variant_name(kind: str) -> str:
    """`lease-expired` -> `LeaseExpiredIncident`."""
    return "".join(part.capitalize() for part in kind.split("-")) + "Incident"


OVERRIDDEN: Final = frozenset({"Incident", *(variant_name(k) for k in DETAILS)})


def _sent_fields(cls: type[msgspec.Struct]) -> list[str]:
    """The fields the server always sends: all but those that may be UNSET (left out)."""
    return [f.encode_name for f in msgspec.structs.fields(cls) if f.default is not UNSET]


def _reply_structs(names: list[str]) -> dict[str, type[wire.Wire]]:
    """The reply Structs (and the objects nested in them) among the components."""
    out: dict[str, type[wire.Wire]] = {}
    for name in names:
        cls = getattr(wire, name, None)
        if isinstance(cls, type) and issubclass(cls, wire.Wire):
            out[name] = cls
    return out


def _incident_variants(components: dict[str, Any]) -> None:
    """`Incident` as a oneOf of one schema per kind (the kind's detail typed)."""
    base = components["Incident"]
    refs = []
    for kind, detail in DETAILS.items():
        name = variant_name(kind)
        variant = copy.deepcopy(base)
        variant["title"] = name
        variant["description"] = f"An incident of kind `{kind}`: {detail.__doc__}"
        variant["properties"]["kind"] = {"const": kind}
        variant["properties"]["detail"] = {"$ref": REF.format(name=detail.__name__)}
        components[name] = variant
        refs.append({"$ref": REF.format(name=name)})
    components["Incident"] = {
        "title": "Incident",
        "description": base["description"] + " One schema per kind, its detail typed.",
        "oneOf": refs,
    }


def component_schemas() -> dict[str, Any]:
    """Every component schema of the document: request bodies, replies, incident details."""
    bodies = [S.SCHEMAS[name] for name in sorted(S.SCHEMAS)]
    details = list(dict.fromkeys(DETAILS.values()))
    _, components = msgspec.json.schema_components(
        [*bodies, *wire.REPLIES, *details], ref_template=REF
    )
    assert REF.format(name="JsonValue") == JSON_VALUE_REF
    components["JsonValue"] = JSON_VALUE_SCHEMA
    for name, cls in _reply_structs(list(components)).items():
        required = _sent_fields(cls)
        if required:
            components[name]["required"] = required
        if issubclass(cls, wire.Reply | wire.ErrorReply):
            prop = components[name]["properties"]["coordinator"]
            components[name]["properties"]["coordinator"] = {
                **prop,
                "enum": COORDINATOR_KINDS,
                "description": "who answered: this server on SQLite, replicas on PostgreSQL, "
                "the client's local queue",
            }
    _incident_variants(components)
    return components
