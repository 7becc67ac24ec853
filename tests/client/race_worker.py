"""One racing driver for the local-queue test: acquire, await the grant, hold briefly, record
the interval, release; `rounds` times. Run as a subprocess: STATE_DIR INDEX LOG_DIR GO ROUNDS."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from client.local import LocalQueue

LANE = "render:local"


async def main(state_dir: str, idx: int, log_dir: str, go: str, rounds: int) -> int:
    q = LocalQueue(state_dir, f"m{idx}", f"claim-{idx}")
    while not Path(go).exists():
        await asyncio.sleep(0.01)
    log = Path(log_dir) / f"{idx}.jsonl"
    try:
        for r in range(rounds):
            rep = await q.acquire(LANE, f"proj{idx % 3}", f"scene-{idx}-{r}", "h")
            while not rep.granted:
                if rep.ticket.state not in ("queued", "held"):
                    print(f"ticket ended while waiting: {rep.ticket.state}", file=sys.stderr)
                    return 1
                rep = await q.await_ticket(LANE, rep.ticket_id, 5)
            enter = time.monotonic_ns()
            st = await q.status(LANE)
            await asyncio.sleep(0.02)
            leave = time.monotonic_ns()
            with log.open("a") as f:
                f.write(
                    json.dumps(
                        {
                            "ticket": rep.ticket_id,
                            "enter": enter,
                            "exit": leave,
                            "fence": rep.ticket.fence,
                            "held": [t.ticket_id for t in st.held],
                        }
                    )
                    + "\n"
                )
            rel = await q.release(LANE, rep.ticket_id, "completed")
            if not rel.released:
                print(f"release refused: {rel.reason}", file=sys.stderr)
                return 1
    finally:
        await q.close()
    return 0


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(asyncio.run(main(a[0], int(a[1]), a[2], a[3], int(a[4]))))
