"""A driver process that dies (os._exit, like kill -9) in the middle of a turn.

    python crash_worker.py URL TOKEN JOURNAL PROVIDER_DIR CLAIM {after-submit|during-submit|queued}

Prints the ticket id once it holds the ticket, then submits to the file-backed simulated
provider of client/driver/example.py and exits with code 17 without releasing anything.
(`queued`: the test kills it with SIGKILL while it still waits for its grant.)"""

from __future__ import annotations

import asyncio
import os
import sys

from client.api import LaneClient
from client.driver import Turn
from client.driver.example import SimulatedProvider
from client.driver.journal import Journal

LANE = "drill:example"  # kit.LANE (this file runs as a script, not in the package)
H = "sha256:" + "77" * 32


async def main() -> None:
    url, token, journal_path, provider_dir, claim, where = sys.argv[1:7]
    backend = LaneClient(url, token, "studio-a", claim)
    journal = Journal(journal_path)
    provider = SimulatedProvider(
        provider_dir, render_seconds=0.0, crash_during_submit=where == "during-submit"
    )
    async with Turn(backend, LANE, "proj", "scene-1", H, lease_seconds=15, journal=journal) as t:
        print(t.ticket_id, flush=True)
        key = t.attempt_id
        await t.submit(lambda: provider.submit(H, key))
        os._exit(17)


if __name__ == "__main__":
    asyncio.run(main())
