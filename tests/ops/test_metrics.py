"""GET /metrics against the real server: auth, Prometheus text, and every lane metric
derived from what the lane actors committed (ManualClock moves time)."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import rfc8785
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.metrics import COMMIT_BUCKETS, Metrics
from tests.harness import SOLO, TOKEN, Running, StartServer, make_config


def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


class Scrape:
    def __init__(self, text: str) -> None:
        self.text = text
        self.samples = parse(text)

    def __call__(self, name: str, **labels: str) -> float:
        """The sample's value; 0 when the series does not exist yet."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)


async def scrape(srv: Running) -> Scrape:
    r = await srv.get("/metrics")
    assert r.status == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain; version=")
    return Scrape(r.text)


async def eventually(srv: Running, check: Any, timeout: float = 10.0) -> Scrape:
    """Scrape until `check(scrape)` holds (the alarm runs on its own task)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        s = await scrape(srv)
        if check(s):
            return s
        if loop.time() > end:
            raise AssertionError(f"metrics never satisfied the check:\n{s.text}")
        await asyncio.sleep(0.02)


def acq(machine: str, scene: str, **extra: Any) -> dict[str, Any]:
    return {
        "lane": SOLO,
        "machineId": machine,
        "claimId": f"c-{machine}",
        "project": "p",
        "scene": scene,
        "promptHash": "h",
        **extra,
    }


def tk(machine: str, ticket_id: str, **extra: Any) -> dict[str, Any]:
    return {"lane": SOLO, "machineId": machine, "claimId": f"c-{machine}", "ticketId": ticket_id,
            **extra}  # fmt: skip


def receipt(machine: str, ticket_id: str, payload: dict[str, Any], *, lie: bool = False,
            rid_from: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    digest = hashlib.sha256(rfc8785.dumps(payload)).hexdigest()
    sent = "sha256:" + (hashlib.sha256(b"not the payload").hexdigest() if lie else digest)
    rid_digest = hashlib.sha256(rfc8785.dumps(rid_from or payload)).hexdigest()
    return tk(
        machine,
        ticket_id,
        receiptId=f"{ticket_id}:lease-acquired:{rid_digest[:16]}",
        phase="lease-acquired",
        payload=payload,
        contentHash=sent,
    )


async def test_metrics_requires_the_bearer_token(server: Running) -> None:
    r = await server.get("/metrics", token=None)
    assert r.status == 401 and r.code == "unauthorized"
    r = await server.get("/metrics", token="wrong-token-0123456789abcdefghijklmnop")
    assert r.status == 401 and r.code == "unauthorized"
    s = await scrape(server)
    # Closed label sets are exported from the start, at zero.
    for verdict in ("verified", "mismatch", "replay", "conflict"):
        assert ("lanes_receipts_total", frozenset({("verdict", verdict)})) in s.samples
    assert s("lanes_releases_total", outcome="completed") == 0
    assert s("lanes_grants_total") == 0


async def test_grants_releases_waits_holds_and_gauges(server: Running) -> None:
    a = await server.ok("acquire", acq("mA", "s1"))
    b = await server.ok("acquire", acq("mB", "s2", leaseSeconds=15))
    assert a["granted"] and not b["granted"]
    s = await scrape(server)
    assert s("lanes_grants_total") == 1
    assert s("lanes_holders", lane=SOLO) == 1
    assert s("lanes_queue_depth", lane=SOLO) == 1
    assert s("lanes_paused", lane=SOLO) == 0

    server.clock.advance(10)
    rel = await server.ok("release", tk("mA", a["ticket"]["ticketId"], outcome="completed"))
    assert rel["released"] and rel["promoted"] == [b["ticket"]["ticketId"]]
    s = await scrape(server)
    assert s("lanes_grants_total") == 2
    assert s("lanes_releases_total", outcome="completed") == 1
    assert s("lanes_holders", lane=SOLO) == 1
    assert s("lanes_queue_depth", lane=SOLO) == 0
    # A waited 0 s, B waited 10 s; A held 10 s.
    assert s("lanes_wait_seconds_count", lane=SOLO) == 2
    assert s("lanes_wait_seconds_sum", lane=SOLO) == 10
    assert s("lanes_wait_seconds_bucket", lane=SOLO, le="5.0") == 1
    assert s("lanes_hold_seconds_count", lane=SOLO) == 1
    assert s("lanes_hold_seconds_sum", lane=SOLO) == 10

    # B stops heartbeating: the alarm reaps it at its expiry, with no client call.
    server.clock.advance(16)
    s = await eventually(server, lambda s: s("lanes_expiries_total") == 1)
    assert s("lanes_holders", lane=SOLO) == 0
    assert s("lanes_hold_seconds_count", lane=SOLO) == 2
    assert s("lanes_hold_seconds_sum", lane=SOLO) == 10 + 15
    assert s("lanes_releases_total", outcome="completed") == 1

    # B's late release: nothing new is released, expired or held.
    late = await server.ok("release", tk("mB", b["ticket"]["ticketId"], outcome="completed"))
    assert late["reason"] == "expired"
    s2 = await scrape(server)
    for name in ("lanes_expiries_total", "lanes_grants_total"):
        assert s2(name) == s(name)
    assert s2("lanes_releases_total", outcome="completed") == 1
    assert s2("lanes_hold_seconds_count", lane=SOLO) == 2

    # A release with no outcome (a hand release) reads outcome="none".
    c = await server.ok("acquire", acq("mC", "s3"))
    await server.ok("release", tk("mC", c["ticket"]["ticketId"]))
    s3 = await scrape(server)
    assert s3("lanes_releases_total", outcome="none") == 1
    assert s3("lanes_commit_batch_size_count") >= 1
    assert s3("lanes_commit_batch_size_sum") >= s3("lanes_commit_batch_size_count")
    assert s3("lanes_commit_seconds_count") == s3("lanes_commit_batch_size_count")


async def test_abandoned_waiters_and_cooldowns(start_server: StartServer) -> None:
    srv = await start_server(config=make_config(waiter_timeout_seconds=20.0))
    held = await srv.ok("acquire", acq("mA", "s1", leaseSeconds=3600))
    await srv.ok("acquire", acq("mB", "s2"))
    srv.clock.advance(21)  # B never calls again: the alarm abandons it
    s = await eventually(srv, lambda s: s("lanes_abandoned_total") == 1)
    assert s("lanes_queue_depth", lane=SOLO) == 0
    assert s("lanes_releases_total", outcome="abandoned") == 0  # the alarm is not a release

    tid = held["ticket"]["ticketId"]
    body = tk("mA", tid, reasonCode="provider-human-check", retryAfterSeconds=60)
    await srv.ok("cooldown", body)
    await srv.ok("cooldown", {**body, "retryAfterSeconds": 120})  # extends the same pause
    s = await scrape(srv)
    assert s("lanes_cooldowns_total") == 1
    assert s("lanes_paused", lane=SOLO) == 1
    srv.clock.advance(121)
    s = await eventually(srv, lambda s: s("lanes_paused", lane=SOLO) == 0)
    assert s("lanes_cooldowns_total") == 1


async def test_receipt_verdicts(server: Running) -> None:
    a = await server.ok("acquire", acq("mA", "s1"))
    tid = a["ticket"]["ticketId"]
    good = receipt("mA", tid, {"n": 1})
    await server.ok("receipt", good, status=201)
    await server.ok("receipt", good, status=200)  # replay
    r = await server.op("receipt", {**good, "contentHash": "sha256:" + "0" * 64})
    assert r.status == 409 and r.code == "receipt-conflict"
    bad = receipt("mA", tid, {"n": 2}, lie=True)
    mismatch = await server.ok("receipt", bad, status=201)
    assert mismatch["contentHashVerified"] is False
    s = await scrape(server)
    for verdict in ("verified", "replay", "conflict", "mismatch"):
        assert s("lanes_receipts_total", verdict=verdict) == 1, verdict


async def test_http_durations_use_canonical_routes_and_no_secrets(server: Running) -> None:
    a = await server.ok("acquire", acq("machine-secretive", "s1"))
    for i in range(3):
        r = await server.get(f"/no-such-path-{i}")
        assert r.status == 404
    r = await server.get("/v1/evidence", params={"lane": SOLO, "ticketId": a["ticket"]["ticketId"]})
    assert r.status == 200
    s = await scrape(server)
    assert s("lanes_http_request_duration_seconds_count",
             route="/v1/lanes/acquire", method="POST", code="200") == 1  # fmt: skip
    assert s("lanes_http_request_duration_seconds_count",
             route="unmatched", method="GET", code="404") == 3  # fmt: skip
    assert s("lanes_http_request_duration_seconds_count",
             route="/v1/evidence", method="GET", code="200") == 1  # fmt: skip
    for secret in ("no-such-path", a["ticket"]["ticketId"], "machine-secretive", "c-machine",
                   TOKEN):  # fmt: skip
        assert secret not in s.text
    labels = {k for (_, ls) in s.samples for k, _ in ls}
    assert labels <= {"lane", "outcome", "verdict", "route", "method", "code", "le"}


async def test_each_app_has_its_own_registry(start_server: StartServer) -> None:
    one = await start_server()
    two = await start_server()
    await one.ok("acquire", acq("mA", "s1"))
    assert (await scrape(one))("lanes_grants_total") == 1
    assert (await scrape(two))("lanes_grants_total") == 0


def test_histograms_counted_on_the_hot_path_read_as_prometheus_own() -> None:
    """The commit and HTTP histograms are counted by the app (a bisect, no locks) and added
    to prometheus_client's when /metrics is read: the text is what observe() would give."""
    values = [0.0, 0.0005, 0.0007, 0.001, 0.3, 2.0, 0.0005, 1e-9, 0.01]
    m = Metrics()
    for v in values:
        m.http_request("/v1/lanes/acquire", "POST", 200, v)
        m._commit_seconds.observe(v)
    for _ in range(2):  # read twice: nothing is added twice
        text = m.render().decode()
    own = CollectorRegistry()
    ref = Histogram("lanes_commit_seconds", "x", buckets=COMMIT_BUCKETS, registry=own)
    for v in values:
        ref.observe(v)
    ours = {k: v for k, v in parse(text).items() if k[0].startswith("lanes_commit_seconds_")}
    theirs = parse(generate_latest(own).decode())
    assert {k: v for k, v in ours.items() if not k[0].endswith("_created")} == {
        k: v for k, v in theirs.items() if not k[0].endswith("_created")
    }
    s = Scrape(text)
    route = {"route": "/v1/lanes/acquire", "method": "POST", "code": "200"}
    assert s("lanes_http_request_duration_seconds_count", **route) == len(values)
    assert s("lanes_http_request_duration_seconds_sum", **route) == sum(values)
