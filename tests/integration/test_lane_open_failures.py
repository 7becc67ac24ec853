"""A lane file that cannot be opened is reported and isolated; a new lane file appears
atomically (D1, D5), against the real server (in process, and `serve` as a process)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from coordinator.store import sqlite as sqlite_store
from tests.harness import CoordinatorProcess
from tests.harness.config import make_config
from tests.harness.inproc import Running, StartServer
from tests.integration.kit import DUO, SOLO, acquire_body

CORRUPT = "corrupt file (file is not a database)"


def _corrupt(data: Path, lane: str) -> bytes:
    data.mkdir(parents=True, exist_ok=True, mode=0o700)
    route, account = lane.split(":")
    junk = os.urandom(8192)
    (data / f"{route}+{account}.sqlite").write_bytes(junk)
    return junk


async def _reads_ok(server: Running) -> dict[str, Any]:
    for path in ("/v1/lanes", "/v1/incidents", "/v1/overview"):
        r = await server.get(path)
        assert r.status == 200, (path, r.status, r.text)
    r = await server.get("/v1/lanes")
    return {x["lane"]: x for x in r["lanes"]}


async def test_corrupt_lane_is_reported_and_isolated(
    start_server: StartServer, tmp_path: Path
) -> None:
    data = tmp_path / "d"
    junk = _corrupt(data, DUO)
    server = await start_server(data_dir=data)  # starts: the broken lane does not stop it
    lanes = await _reads_ok(server)
    assert lanes[DUO]["error"] == CORRUPT and lanes[DUO]["held"] == 0
    await server.ok("acquire", acquire_body())  # a healthy lane works
    await server.ok("status", {"lane": SOLO})
    lanes = await _reads_ok(server)
    assert "error" not in lanes[SOLO] and lanes[SOLO]["held"] == 1
    r = await server.op("acquire", acquire_body(lane=DUO))
    assert r.status == 503 and r.code == "unavailable", r.text
    assert CORRUPT in r.message and "Traceback" not in r.text
    r = await server.get("/v1/incidents", params={"lane": DUO})
    assert r.status == 503 and CORRUPT in r.message
    assert server.lane_file(DUO).read_bytes() == junk  # never overwritten
    m = await server.get("/metrics")
    assert "lanes_open_failures 1.0" in m.text


async def test_failed_first_open_leaves_no_lane_file(
    start_server: StartServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await start_server(data_dir=tmp_path / "d")

    def full(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(sqlite_store, "apply_migrations", full)
        r = await server.op("acquire", acquire_body())
        assert r.status == 503 and "ENOSPC" in r.message, r.text
    assert sorted(p.name for p in server.data_dir.iterdir() if "sqlite" in p.name) == []
    lanes = await _reads_ok(server)
    assert SOLO not in lanes  # no file: not a lane
    await server.ok("acquire", acquire_body())  # the next acquire makes the lane
    lanes = await _reads_ok(server)
    assert "error" not in lanes[SOLO] and lanes[SOLO]["held"] == 1


async def test_empty_file_from_older_version_is_no_lane(
    start_server: StartServer, tmp_path: Path
) -> None:
    data = tmp_path / "d"
    data.mkdir(mode=0o700)
    (data / "solo+other.sqlite").touch()  # an unconfigured-by-name lane of an enforced route
    server = await start_server(data_dir=data)
    lanes = await _reads_ok(server)
    assert "solo:other" not in lanes  # not listed as a lane
    st = await server.ok("status", {"lane": "solo:other"})
    assert st["held"] == []
    await server.ok("acquire", acquire_body(lane="solo:other"))  # replaced atomically
    assert (data / "solo+other.sqlite").stat().st_size > 0
    lanes = await _reads_ok(server)
    assert lanes["solo:other"]["held"] == 1 and "error" not in lanes["solo:other"]
    assert [p.name for p in data.iterdir() if ".tmp-" in p.name] == []


def test_serve_starts_with_a_corrupt_lane_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    junk = _corrupt(data, DUO)
    srv = CoordinatorProcess(data, config=make_config())
    try:
        failed = srv.wait_for_event("lane.open_failed")
        assert failed["file"] == "duo+main.sqlite" and failed["reason"] == CORRUPT
        srv.op("acquire", acquire_body())
        status, reply = srv.request("GET", "/v1/lanes")
        assert status == 200
        assert {x["lane"]: x.get("error") for x in reply["lanes"]}[DUO] == CORRUPT
    finally:
        assert srv.stop() == 0
    assert (data / "duo+main.sqlite").read_bytes() == junk
