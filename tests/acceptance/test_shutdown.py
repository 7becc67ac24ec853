"""A graceful stop (SIGTERM) of the real `lane-coordinator` with long polls in flight: they
are answered at once with the ticket's state, and the server exits well inside its grace
period with its lanes closed (not cut off when the grace period runs out)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

from tests.harness import CoordinatorProcess, write_token_file

TOKEN = "shutdown-token-0123456789-abcdefghijklmnopqrstu"
CONFIG = "[routes.solo]\ncapacity = 1\n"


def test_sigterm_answers_parked_long_polls_and_exits_promptly(tmp_path: Path) -> None:
    write_token_file(tmp_path / "token", TOKEN)
    (tmp_path / "c.toml").write_text(CONFIG, encoding="utf-8")
    srv = CoordinatorProcess(tmp_path / "data", tmp_path / "token", tmp_path / "c.toml")
    try:
        base = {"lane": "solo:main", "machineId": "m1", "claimId": "c1", "project": "p"}
        srv.op("acquire", {**base, "scene": "s", "promptHash": "held"}, TOKEN)
        waiters = [
            srv.op("acquire", {**base, "scene": f"s{i}", "promptHash": f"q{i}"}, TOKEN)["ticket"]
            for i in range(3)
        ]
        replies: list[tuple[int, Any]] = []
        lock = threading.Lock()

        def long_poll(ticket_id: str) -> None:
            body = {"protocolVersion": 1, **base, "ticketId": ticket_id, "waitSeconds": 60}
            got = srv.request("POST", "/v1/lanes/await", TOKEN, body)
            with lock:
                replies.append(got)

        threads = [
            threading.Thread(target=long_poll, args=(w["ticketId"],), daemon=True) for w in waiters
        ]
        for t in threads:
            t.start()
        time.sleep(1.0)  # let them park (they would otherwise wait 60 s)
        assert not replies
        mark = len(srv.lines)
        started = time.monotonic()
        srv.signal(signal.SIGTERM)
        rc = srv.proc.wait(timeout=60)
        took = time.monotonic() - started
        for t in threads:
            t.join(timeout=30)
        print(f"\nSIGTERM with 3 parked long polls: exited in {took:.2f} s")
        assert rc == 0
        assert took < 8.0  # the grace period is 10 s; draining takes milliseconds
        assert len(replies) == 3
        for status, body in replies:
            assert status == 200, body
            assert body["ticket"]["state"] == "queued" and body["granted"] is False
        srv.wait_for_event("coordinator.stopped", start=mark, timeout=10)
        assert not any("grace period ran out" in ln for ln in srv.lines[mark:])
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
        srv.stop()
