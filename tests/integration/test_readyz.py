"""GET /readyz: what a load balancer routes on. 200 while the server can commit (running,
its data dir writable), 503 `unavailable` with why otherwise; broken lanes are counted for
operators but do not make it unready (every other lane is served)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from coordinator.actor import readiness as readiness_mod
from tests.harness.inproc import Reply, Running, StartServer
from tests.integration.kit import DUO, SOLO, acquire_body


def _corrupt(data: Path, lane: str) -> None:
    data.mkdir(parents=True, exist_ok=True, mode=0o700)
    route, account = lane.split(":")
    (data / f"{route}+{account}.sqlite").write_bytes(os.urandom(8192))


def _assert_unready(r: Reply, why: str) -> None:
    assert r.status == 503, r.text
    assert r.code == "unavailable" and why in r.message, r.text
    assert r.body is not None and "coordinator" not in r.body  # outside /v1: no coordinator


async def test_ready_while_running_public_and_no_data(server: Running) -> None:
    await server.ok("acquire", acquire_body())
    for token in (None, "not-a-token", server.token):
        r = await server.get("/readyz", token=token)
        assert r.status == 200, r.text
        assert r.headers["Content-Type"].startswith("application/json")
        assert r.body == {"ready": True, "brokenLanes": 0}
    r = await server.request("HEAD", "/readyz", token=None)
    assert r.status == 200


async def test_unready_once_shutdown_has_begun(server: Running) -> None:
    assert (await server.get("/readyz", token=None)).status == 200
    # What the runner does first on SIGTERM (after closing the listener): on_shutdown, which
    # drains the registry. Here the listener is still open, so the probe can see it.
    await server.app.shutdown()
    _assert_unready(await server.get("/readyz", token=None), "shutting down")
    r = await server.get("/healthz", token=None)
    assert r.status == 200  # still alive: liveness is not readiness


async def test_unready_when_data_dir_is_gone(
    server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readiness_mod, "READY_CHECK_SECONDS", 0.0)
    assert (await server.get("/readyz", token=None)).status == 200
    moved = server.data_dir.with_name(server.data_dir.name + "-moved")
    server.data_dir.rename(moved)  # nothing can be created in the data dir any more
    try:
        _assert_unready(await server.get("/readyz", token=None), "data dir not writable")
    finally:
        moved.rename(server.data_dir)
    assert (await server.get("/readyz", token=None)).status == 200
    assert not list(server.data_dir.glob(".readyz-probe*"))  # the probe file is removed


async def test_probe_is_cached(server: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readiness_mod, "READY_CHECK_SECONDS", 3600.0)
    assert (await server.get("/readyz", token=None)).status == 200
    moved = server.data_dir.with_name(server.data_dir.name + "-moved")
    server.data_dir.rename(moved)
    try:
        for _ in range(20):  # a flood of probes reuses the last check
            assert (await server.get("/readyz", token=None)).status == 200
    finally:
        moved.rename(server.data_dir)


async def test_broken_lane_is_counted_and_stays_ready(
    start_server: StartServer, tmp_path: Path
) -> None:
    data = tmp_path / "d"
    _corrupt(data, DUO)
    server = await start_server(data_dir=data)
    # lane files are looked at after the socket listens (in the background): the broken one
    # is found within moments, and readiness never depended on it
    for _ in range(500):
        r = await server.get("/readyz", token=None)
        assert r.status == 200, r.text
        if r.body["brokenLanes"]:
            break
        await asyncio.sleep(0.01)
    assert r.body == {"ready": True, "brokenLanes": 1}
    await server.ok("status", {"lane": SOLO})  # other lanes still work
