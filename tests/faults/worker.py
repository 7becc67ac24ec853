"""A driver in its own process, so a test can SIGSTOP it: `python -m tests.faults.worker
URL TOKEN LANE MACHINE ROUNDS HOLD`.

Each round: acquire (lease 15 s, the minimum) → await until held → heartbeat → print
`{"ev": "holding", ...}` → sleep HOLD seconds (the test freezes the process meanwhile) →
heartbeat → release (`lease-lost` when the heartbeat said `expired`, else `completed`) →
print `{"ev": "round", ...}` with both replies. Every attempt is printed as a JSON line
(`sent`, then `replied` or `failed`, times from time.monotonic(), the clock the test's
ledger uses) for the test to put into its ledger. Retries like tests/harness/load.py: the
same body again on a failed connection, a timeout or a 503.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from tests.harness.load import Problem, answer, decode

LEASE = 15
CALL_TIMEOUT = 5.0
DEADLINE = 60.0
_seq = itertools.count(1)


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def call(url: str, token: str, op: str, body: dict[str, Any], wait: float = 0) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE
    data = json.dumps(body).encode()
    while True:
        seq = next(_seq)
        emit(ev="sent", seq=seq, op=op, lane=body["lane"], body=body, url=url, t=time.monotonic())
        req = urllib.request.Request(f"{url}/v1/lanes/{op}", data=data, method="POST")
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=CALL_TIMEOUT + wait) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except OSError as exc:
            emit(ev="failed", seq=seq, error=type(exc).__name__, t=time.monotonic())
        else:
            reply = decode(raw)
            emit(ev="replied", seq=seq, status=status, reply=reply, t=time.monotonic())
            try:
                got = answer(status, reply, op)
            except Problem as exc:
                raise SystemExit(str(exc)) from None
            if got is not None:
                return got
        if time.monotonic() > deadline:
            raise SystemExit(f"{op}: no answer within {DEADLINE} s")
        time.sleep(0.2)


def main(argv: list[str]) -> int:
    url, token, lane, machine, rounds, hold = argv
    base = {"protocolVersion": 1, "lane": lane, "machineId": machine, "claimId": f"{machine}-c"}
    for n in range(int(rounds)):
        ident = {"project": "victim", "scene": f"{machine}-{n}", "promptHash": "h"}
        ticket = call(url, token, "acquire", {**base, **ident, "leaseSeconds": LEASE})["ticket"]
        tid = ticket["ticketId"]
        while ticket["state"] == "queued":
            body = {**base, "ticketId": tid, "waitSeconds": 2}
            ticket = call(url, token, "await", body, wait=2)["ticket"]
        call(url, token, "heartbeat", {**base, "ticketId": tid})
        emit(ev="holding", ticketId=tid, fence=ticket["fence"], t=time.monotonic())
        time.sleep(float(hold))
        beat = call(url, token, "heartbeat", {**base, "ticketId": tid})
        outcome = "completed" if beat["refreshed"] else "lease-lost"
        rel = call(url, token, "release", {**base, "ticketId": tid, "outcome": outcome})
        emit(ev="round", ticketId=tid, heartbeat=beat, release=rel, t=time.monotonic())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
