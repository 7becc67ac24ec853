"""Lanes are bounded (D2): `max_lanes` refuses a NEW lane with 503 and makes no file for it,
while every existing lane (and every unenforced route) goes on; `metrics_max_lanes` bounds
the per-lane Prometheus series while the totals count every lane."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.harness.inproc import Running, StartServer
from tests.integration.kit import FREE, acquire_body, ticket_body

LIMIT_MESSAGE = (
    "lane limit reached: max_lanes = 3; raise it in the config or remove unused lane files"
)


def lane_files(data: Path) -> list[str]:
    return sorted(p.name for p in data.iterdir() if p.name.endswith(".sqlite"))


async def take(server: Running, lane: str) -> str:
    reply = await server.ok("acquire", acquire_body(lane=lane))
    assert reply["ticket"]["state"] == "held", reply
    return str(reply["ticket"]["ticketId"])


async def test_new_lane_beyond_max_lanes_is_refused_and_makes_no_file(
    start_server: StartServer,
) -> None:
    server = await start_server(max_lanes=3)
    tickets = {lane: await take(server, lane) for lane in ("duo:a", "duo:b", "solo:c")}
    assert len(lane_files(server.data_dir)) == 3
    for _ in range(2):
        r = await server.op("acquire", acquire_body(lane="duo:d"))
        assert r.status == 503 and r.code == "unavailable", r.text
        assert r.message == LIMIT_MESSAGE
    assert not server.lane_file("duo:d").exists()
    assert len(lane_files(server.data_dir)) == 3
    r = await server.op("status", {"lane": "duo:d"})  # a read makes no lane either
    assert r.status == 200, r.text
    assert not server.lane_file("duo:d").exists()
    for lane, tid in tickets.items():  # the existing lanes go on: at the limit, counted once
        await server.ok("release", ticket_body(lane, tid, outcome="completed"))
        await take(server, lane)
    await server.ok("acquire", acquire_body(lane=FREE))  # unenforced: no lane, no limit
    assert len(lane_files(server.data_dir)) == 3
    m = await server.get("/metrics")
    assert "lanes_lane_limit_refusals_total 2.0" in m.text


async def test_configured_lanes_count_and_are_always_admitted(
    start_server: StartServer,
) -> None:
    server = await start_server(max_lanes=2, lanes={"duo:cfg1": 2, "duo:cfg2": 2})
    r = await server.op("acquire", acquire_body(lane="duo:x"))  # 2 configured: full
    assert r.status == 503 and "max_lanes = 2" in r.message, r.text
    await take(server, "duo:cfg1")
    await take(server, "duo:cfg2")
    assert lane_files(server.data_dir) == ["duo+cfg1.sqlite", "duo+cfg2.sqlite"]


async def test_restart_with_more_files_than_max_lanes_serves_them_all(
    start_server: StartServer, tmp_path: Path
) -> None:
    data = tmp_path / "d"
    first = await start_server(data_dir=data)
    lanes = [f"duo:l{i}" for i in range(5)]
    tickets = {lane: await take(first, lane) for lane in lanes}
    await first.stop()
    server = await start_server(data_dir=data, max_lanes=3)
    for lane, tid in tickets.items():  # existing data is never refused
        await server.ok("release", ticket_body(lane, tid, outcome="completed"))
        await take(server, lane)
    r = await server.op("acquire", acquire_body(lane="duo:new"))
    assert r.status == 503 and r.message == LIMIT_MESSAGE, r.text
    assert len(lane_files(data)) == 5


def per_lane_and_totals(text: str) -> tuple[set[str], dict[str, float]]:
    lanes: set[str] = set()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "lane" in s.labels:
                lanes.add(s.labels["lane"])
            elif s.name.startswith("lanes_all_") or s.name == "lanes_grants_total":
                totals[s.name] = s.value
    return lanes, totals


async def test_per_lane_series_are_bounded_and_totals_count_every_lane(
    start_server: StartServer,
) -> None:
    server = await start_server(metrics_max_lanes=2)
    lanes = [f"duo:m{i}" for i in range(5)]
    for lane in lanes:
        await take(server, lane)
    await server.ok("acquire", acquire_body(lane="duo:m4", machine="mB", claim="cB", scene="s2"))
    await server.ok("acquire", acquire_body(lane="duo:m4", machine="mC", claim="cC", scene="s3"))
    m = await server.get("/metrics")
    series, totals = per_lane_and_totals(m.text)
    assert series == {"duo:m3", "duo:m4"}, series  # the two most recently active
    assert totals["lanes_grants_total"] == 6, totals
    assert totals["lanes_all_holders"] == 6  # 1 in each lane, 2 in duo:m4
    assert totals["lanes_all_queue_depth"] == 1
    assert totals["lanes_all_paused"] == 0
