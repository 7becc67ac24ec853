"""Ghost tickets after a freeze (issue 12, "Also seen"): acquires a client abandoned while the
server was frozen (SIGSTOP) still run when it resumes, and leave queued tickets nobody waits
for.

A holder keeps `solo:ghost` (capacity 1) busy; the server is stopped; an impatient client
sends acquires with a 1 s timeout, each for a new identity (a driver that gave up and moved
on), and gives up on each; SIGCONT. A correct server runs none of them (their connections
were closed before their jobs ran): no queued ticket of the impatient client, and the
holder's release promotes no ticket nobody waits for.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.faults.kit import assert_no_traceback
from tests.faults.table import Row
from tests.harness import StartCoordinator, make_config

LANE = "solo:ghost"
ABANDONED = 5


def _acquire(machine: str, scene: str) -> dict[str, Any]:
    return {"lane": LANE, "machineId": machine, "project": "p", "scene": scene, "promptHash": "h"}


@pytest.mark.fault("(b2) ghost tickets: acquires abandoned while the server was frozen")
async def test_abandoned_acquires_leave_no_ghost_tickets(
    row: Row, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    srv = start_coordinator(tmp_path / "data", config=make_config())
    held = srv.op("acquire", _acquire("holder", "0"))["ticket"]
    assert held["state"] == "held"
    gave_up = 0
    srv.signal(signal.SIGSTOP)
    try:
        async with aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {srv.token}"},
            timeout=aiohttp.ClientTimeout(total=1.0),
        ) as s:
            for n in range(ABANDONED):
                body = {"protocolVersion": 1, **_acquire("impatient", str(n))}
                try:
                    async with s.post(f"{srv.url}/v1/lanes/acquire", json=body) as r:
                        await r.read()
                except TimeoutError:
                    gave_up += 1  # the client closes the connection and moves on
    finally:
        srv.signal(signal.SIGCONT)
    assert gave_up == ABANDONED, "the frozen server answered"
    await asyncio.sleep(1.0)  # the resumed server works through its backlog
    st = srv.status(LANE)
    ghosts = [t for t in st["queued"] if t["machineId"] == "impatient"]
    rel = srv.op(
        "release",
        {"lane": LANE, "machineId": "holder", "ticketId": held["ticketId"], "outcome": "completed"},
    )
    promoted = srv.status(LANE)["held"]
    ghost_holder = [t for t in promoted if t["machineId"] == "impatient"]
    row.note(
        f"{gave_up} acquires abandoned during a freeze: {len(ghosts)} queued tickets nobody "
        f"waits for after SIGCONT; the holder's release promoted {rel['promoted']} "
        f"({'a ghost: the slot is held until its lease expires' if ghost_holder else 'no ghost'})"
    )
    assert_no_traceback([srv])
    assert ghosts == [], f"{len(ghosts)} ghost tickets queued: {[t['ticketId'] for t in ghosts]}"
    assert ghost_holder == []
