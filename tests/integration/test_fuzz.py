"""Fuzzing the real server: hypothesis-made bodies and query strings.

Whatever arrives, the reply is never a 5xx, errors have the protocol's shape and a protocol code
with its status, and no reply carries a traceback or the token. About 200 examples in all.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.kit import DUO, ERROR_CODES, FREE, PHASES, SOLO, acquire_body

if TYPE_CHECKING:
    from tests.harness import Reply, Running

POSTS = ("acquire", "await", "heartbeat", "release", "receipt", "status", "history", "cooldown")
FUZZ_SETTINGS = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MISSING = object()
TICKET = "<live ticket>"  # replaced by a real ticket id at run time

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["", " ", "\x00", "\n", "\ud7ff", "𝄞", "../../etc/passwd", "1" * 300]),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def field(*plausible: Any) -> st.SearchStrategy[Any]:
    """A field's value: missing, a plausible one, or any JSON value."""
    return st.one_of(st.just(MISSING), st.sampled_from(plausible), json_values)


LANES = field(SOLO, DUO, FREE, "solo:other", "Solo:main", "solo", "a:b:c", "x" * 70 + ":y")
MACHINE = field("mA", "mB", "bad id", "m" * 65)
CLAIM = field("cA", "cB", "", "c" * 129)
TICKET_ID = field(TICKET, TICKET, "t_unknown", "unlimited-1", "")
NUMBERS = field(0, 1, 15, 30, 60, 3600, 7200, -1, 1e308, 2**63, 0.5)
TEXT = field("p1", "s1", "h1", "", "x" * 129)
HASH = "sha256:" + "ab" * 32

FIELDS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "acquire": {"project": TEXT, "scene": TEXT, "promptHash": TEXT, "leaseSeconds": NUMBERS},
    "await": {"ticketId": TICKET_ID, "waitSeconds": NUMBERS},
    "heartbeat": {"ticketId": TICKET_ID, "leaseSeconds": NUMBERS},
    "release": {
        "ticketId": TICKET_ID,
        "outcome": field("completed", "expired", None, "lease-lost"),
        "providerJobId": field("job-1", "j" * 257),
        "note": field("n", "n" * 501),
    },
    "receipt": {
        "ticketId": TICKET_ID,
        "receiptId": field(f"{TICKET}:lease-acquired:{'ab' * 8}", "x:y:z", f"{TICKET}:bad:0"),
        "phase": field(*PHASES, "done"),
        "payload": field({"a": 1}, {"n": 2**53}, {"f": 1.5e300}, [], {"s": "é\u2028"}),
        "contentHash": field(HASH, "sha256:" + "AB" * 32, "md5:00"),
    },
    "status": {"includeReceipts": field(True, False, "yes")},
    "history": {"limit": NUMBERS, "project": TEXT},
    "cooldown": {
        "ticketId": TICKET_ID,
        "reasonCode": field("provider-human-check", "other"),
        "retryAfterSeconds": NUMBERS,
    },
}


VALID: dict[str, dict[str, Any]] = {
    "acquire": {"project": "p1", "scene": "s1", "promptHash": "h1", "leaseSeconds": 60},
    "await": {"ticketId": TICKET, "waitSeconds": 1},
    "heartbeat": {"ticketId": TICKET},
    "release": {"ticketId": TICKET, "outcome": "completed"},
    "receipt": {
        "ticketId": TICKET,
        "receiptId": f"{TICKET}:lease-acquired:{'ab' * 8}",
        "phase": "lease-acquired",
        "payload": {"a": 1},
        "contentHash": HASH,
    },
    "status": {"includeReceipts": True},
    "history": {"limit": 10},
    "cooldown": {"ticketId": TICKET, "reasonCode": "provider-human-check", "retryAfterSeconds": 30},
}


@st.composite
def bodies(draw: st.DrawFn, op: str) -> Any:
    """Mostly a valid body with 0-3 fields deleted or replaced; sometimes any JSON or bytes."""
    kind = draw(st.sampled_from(["mutated"] * 6 + ["json", "bytes"]))
    if kind == "json":
        return draw(json_values)
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    lane = draw(st.sampled_from([SOLO, SOLO, DUO, FREE]))
    body: dict[str, Any] = {
        "protocolVersion": 1,
        "lane": lane,
        "machineId": "mA",
        "claimId": "cA",
        **VALID[op],
    }
    strategies = {
        "protocolVersion": field(1, 2, "1", 1.0),
        "lane": LANES,
        "machineId": MACHINE,
        "claimId": CLAIM,
        **FIELDS[op],
    }
    names = draw(st.lists(st.sampled_from(sorted(strategies)), max_size=3, unique=True))
    for name in names:
        value = draw(strategies[name], label=name)
        if value is MISSING:
            body.pop(name, None)
        else:
            body[name] = value
    extras = draw(st.dictionaries(st.text(max_size=12), json_values, max_size=2))
    return {**extras, **body}


def _encode(body: Any, ticket_id: str) -> bytes:
    if isinstance(body, bytes):
        return body
    text = json.dumps(body, allow_nan=True, ensure_ascii=False)
    return text.replace(TICKET, ticket_id).encode("utf-8", "surrogatepass")


async def _live_ticket(server: Running) -> str:
    """A live ticket of mA/cA on solo:main (the owner's retry returns the same one)."""
    r = await server.ok("acquire", acquire_body(prompt="fuzz-anchor"))
    tid: str = r["ticket"]["ticketId"]
    return tid


async def _with_time_moving(server: Running, coro: Any) -> Reply:
    """Run a request while the ManualClock keeps moving, so a parked long poll ends."""
    task: asyncio.Task[Reply] = asyncio.ensure_future(coro)
    while not task.done():
        await asyncio.wait({task}, timeout=0.02)
        if not task.done():
            server.clock.advance(61)
    return task.result()


def check_reply(r: Reply, server: Running) -> None:
    assert r.status < 500, (r.status, r.text)
    assert "Traceback" not in r.text and 'File "' not in r.text, r.text
    assert server.token not in r.text
    if r.status in (301, 302, 303, 307, 308):
        return
    assert isinstance(r.body, dict), (r.status, r.text)
    if r.status >= 400:
        assert set(r.body) - {"coordinator"} == {"error"}, r.text
        code = r.code
        assert code in ERROR_CODES, r.text
        assert ERROR_CODES[code] == r.status, r.text
        assert isinstance(r.body["error"]["message"], str) and r.body["error"]["message"]
    elif r.body != {"ok": True}:
        assert r.body.get("coordinator") == "actor-sqlite", r.text


@pytest.mark.parametrize("op", POSTS)
@FUZZ_SETTINGS
@given(data=st.data())
async def test_post_bodies_never_crash_the_server(
    server: Running, op: str, data: st.DataObject
) -> None:
    body = data.draw(bodies(op), label="body")
    ticket_id = await _live_ticket(server)
    raw = _encode(body, ticket_id)
    r = await _with_time_moving(
        server,
        server.request(
            "POST", f"/v1/lanes/{op}", data=raw, headers={"Content-Type": "application/json"}
        ),
    )
    check_reply(r, server)
    # the server still answers a plain call afterwards
    assert (await server.op("status", {"lane": SOLO})).status == 200


# Query strings stay under aiohttp's 8190-byte request-line limit: past it, aiohttp's HTTP
# parser answers a plain-text 400 before the application sees the request.
GET_PATHS = (
    "/v1/lanes",
    "/v1/incidents",
    "/v1/machines",
    "/v1/evidence",
    "/v1/overview",
    "/v1/dashboard",
)
query_values = st.one_of(
    st.text(max_size=30),
    st.sampled_from([SOLO, DUO, FREE, "0", "-1", "5000", "99999", "1e3", "１２", "9" * 1500]),
)
query_params = st.dictionaries(
    st.one_of(
        st.sampled_from(["lane", "limit", "ticketId", "project", "history", "queued"]),
        st.text(max_size=8),
    ),
    query_values,
    max_size=4,
)
raw_queries = st.lists(
    st.sampled_from(
        [
            "lane=",
            "limit=",
            "ticketId=",
            "&",
            "=",
            "solo",
            ":",
            "main",
            "%",
            "%0A",
            "%ff",
            "%ED%A0%80",
            "%00",
            "+",
            ";",
            "?",
            "[",
            "]",
            "-1",
            "99",
            "t_x",
        ]
    ),
    max_size=14,
).map("".join)


@FUZZ_SETTINGS
@given(path=st.sampled_from(GET_PATHS), params=query_params, raw=raw_queries, use_raw=st.booleans())
async def test_get_query_strings_never_crash_the_server(
    server: Running, path: str, params: dict[str, str], raw: str, use_raw: bool
) -> None:
    ticket_id = await _live_ticket(server)
    if use_raw:
        r = await server.get(f"{path}?{raw}", raw_url=True)
    else:
        query = {k: v.replace(TICKET, ticket_id) for k, v in params.items()}
        r = await server.get(path, params=query)
    check_reply(r, server)
