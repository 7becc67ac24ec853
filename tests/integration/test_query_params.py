"""GET query parameters over HTTP: each read's bad parameter is 400 bad-request with the
exact message it has always had (the parameters are decoded from one Struct per read, in
coordinator/protocol/queries.py), and absent or empty ones take their defaults."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from coordinator.protocol import constants as C
from coordinator.protocol.names import LANE_RULE
from tests.integration.kit import SOLO, acquire_body, assert_error

if TYPE_CHECKING:
    from tests.harness import Running

REQUIRED = "lane: required query parameter"
EMPTY_PROJECT = "project: empty; leave it out for every project"

# (path, raw query string, the message of the 400 bad-request it answers)
BAD = [
    ("/v1/incidents", "limit=0", "limit: must be between 1 and 1000"),
    ("/v1/incidents", "limit=1001", "limit: must be between 1 and 1000"),
    ("/v1/incidents", "limit=x", "limit: must be an integer"),
    ("/v1/incidents", "lane=", LANE_RULE),
    ("/v1/incidents", "lane=solo", LANE_RULE),
    ("/v1/incidents", "limit=0&lane=solo", LANE_RULE),  # lane is checked first
    ("/v1/evidence", "", REQUIRED),
    ("/v1/evidence", "lane=", REQUIRED),
    ("/v1/evidence", "ticketId=t_x", REQUIRED),
    ("/v1/evidence", "lane=a%2Fb:c", LANE_RULE),
    ("/v1/overview", "project=", EMPTY_PROJECT),
    ("/v1/overview", "project=" + "p" * 129, "project: at most 128 characters"),
    ("/v1/overview", "history=201", "history: must be between 0 and 200"),
    ("/v1/overview", "history=-1", "history: must be between 0 and 200"),
    ("/v1/overview", "queued=201", "queued: must be between 0 and 200"),
    ("/v1/overview", "receipts=51", "receipts: must be between 0 and 50"),
    ("/v1/overview", "incidents=0", "incidents: must be between 1 and 1000"),
    ("/v1/overview", "incidents=abc", "incidents: must be an integer"),
    ("/v1/overview", "limit=0", "limit: must be between 1 and 500"),
    ("/v1/overview", "limit=501", "limit: must be between 1 and 500"),
    ("/v1/overview", "limit=1.5", "limit: must be an integer"),
    ("/v1/overview", "lane=", LANE_RULE),
    ("/v1/overview", "lane=..%2Fetc:passwd", LANE_RULE),
    ("/v1/overview", "limit=0&history=x&project=", EMPTY_PROJECT),  # project first
    ("/v1/overview", "limit=0&lane=x", LANE_RULE),
]


@pytest.mark.parametrize(("path", "raw", "message"), BAD)
async def test_a_bad_parameter_is_400_with_its_message(
    server: Running, path: str, raw: str, message: str
) -> None:
    r = await server.get(f"{path}?{raw}" if raw else path, raw_url=True)
    assert_error(r, 400, "bad-request")
    assert r.message == message


async def test_absent_and_empty_numbers_take_their_defaults(server: Running) -> None:
    defaults = {
        "history": C.OVERVIEW_DEFAULT_HISTORY,
        "queued": C.OVERVIEW_DEFAULT_QUEUED,
        "receipts": C.OVERVIEW_DEFAULT_RECEIPTS,
        "incidents": C.DEFAULT_INCIDENTS_LIMIT,
        "limit": C.OVERVIEW_DEFAULT_LOG_LIMIT,
    }
    r = await server.get("/v1/overview")
    assert r.status == 200 and r["limits"] == defaults
    r = await server.get("/v1/overview?history=&queued=&receipts=&incidents=&limit=", raw_url=True)
    assert r.status == 200 and r["limits"] == defaults
    r = await server.get("/v1/overview", params={"history": "0", "limit": "7", "other": "x"})
    assert r.status == 200 and r["limits"] == {**defaults, "history": 0, "limit": 7}
    r = await server.get("/v1/incidents?limit=", raw_url=True)
    assert r.status == 200 and r["incidents"] == []


async def test_lane_and_ticket_parameters_are_read(server: Running) -> None:
    t = (await server.ok("acquire", acquire_body()))["ticket"]["ticketId"]
    r = await server.get("/v1/evidence", params={"lane": SOLO, "ticketId": ""})
    assert r.status == 200 and r["lane"] == SOLO and r["jobEvidence"] is None
    r = await server.get("/v1/evidence", params={"lane": SOLO, "ticketId": t})
    assert r.status == 200 and r["jobEvidence"]["ticketId"] == t
    r = await server.get("/v1/overview", params={"lane": SOLO, "project": "p1"})
    assert r.status == 200 and (r["log"]["lane"], r["log"]["project"]) == (SOLO, "p1")
