"""A scripted day on the real `lane-coordinator serve` with a credential per computer
(docs/protocol.md#credentials): three studio machines with their own driver credentials, a
control-room reader, and an operator's admin credential that hand-releases a killed driver's
ticket. Every row the day leaves — tickets, receipts, incidents, render log, the pause — names
the right credential, in the replies and in the lane file itself; every lane log line of a
write names one too; no token appears in any reply, log line or file of the data dir."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.harness import CoordinatorProcess, write_config
from tests.harness.credentials import Cred, write_credentials
from tests.integration.kit import jcs_hash

LANE = "solo:main"
A = Cred("studio-a", "driver", "studio-a")
B = Cred("studio-b", "driver", "studio-b")
C = Cred("studio-c", "driver", "studio-c")
READER = Cred("control-room", "reader")
OPS = Cred("ops", "admin")
EVERYONE = (A, B, C, READER, OPS)


class Day:
    """The server, and every reply it gave (to grep them for secrets)."""

    def __init__(self, srv: CoordinatorProcess) -> None:
        self.srv = srv
        self.replies: list[str] = []

    def call(self, cred: Cred, name: str, body: dict[str, Any]) -> tuple[int, Any]:
        status, reply = self.srv.request(
            "POST", f"/v1/lanes/{name}", cred.token, {"protocolVersion": 1, "lane": LANE, **body}
        )
        self.replies.append(json.dumps(reply))
        return status, reply

    def ok(self, cred: Cred, name: str, body: dict[str, Any]) -> dict[str, Any]:
        status, reply = self.call(cred, name, body)
        assert status in (200, 201), (name, cred.name, status, reply)
        assert isinstance(reply, dict)
        return reply

    def get(self, cred: Cred, path: str) -> dict[str, Any]:
        status, reply = self.srv.request("GET", path, cred.token)
        self.replies.append(json.dumps(reply))
        assert status == 200, (path, reply)
        assert isinstance(reply, dict)
        return reply

    def acquire(self, cred: Cred, project: str, prompt: str) -> dict[str, Any]:
        body = {"machineId": cred.machine, "claimId": f"{cred.name}-1", "project": project,
                "scene": "s1", "promptHash": prompt}  # fmt: skip
        return self.ok(cred, "acquire", body)

    def receipt(self, cred: Cred, tid: str, phase: str, *, bad: bool = False) -> None:
        payload = {"phase": phase}
        h = "sha256:" + "0" * 64 if bad else jcs_hash(payload)
        rid = f"{tid}:{phase}:{h.removeprefix('sha256:')[:16]}"
        body = {"machineId": cred.machine, "ticketId": tid, "receiptId": rid, "phase": phase,
                "payload": payload, "contentHash": h}  # fmt: skip
        self.ok(cred, "receipt", body)


def _rows(lane_file: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(f"file:{lane_file}?mode=ro", uri=True)
    try:
        return [tuple(r) for r in db.execute(sql)]
    finally:
        db.close()


def test_a_day_of_three_machines_names_the_right_credential_everywhere(tmp_path: Path) -> None:
    tokens = write_credentials(tmp_path / "token", list(EVERYONE))
    data = tmp_path / "data"
    srv = CoordinatorProcess(data, tokens, write_config(tmp_path / "c.toml"))
    day = Day(srv)
    try:
        # morning: A renders, B and C wait
        a1 = day.acquire(A, "film", "a1")["ticket"]["ticketId"]
        b1 = day.acquire(B, "ads", "b1")["ticket"]["ticketId"]
        c1 = day.acquire(C, "docs", "c1")["ticket"]["ticketId"]
        for phase in ("lease-acquired", "provider-submitted", "provider-terminal"):
            day.receipt(A, a1, phase)
        day.ok(A, "release", {"machineId": "studio-a", "ticketId": a1, "outcome": "completed"})
        # B is granted, records a receipt with a wrong hash, hits a human check: a cooldown
        day.receipt(B, b1, "lease-acquired", bad=True)
        cooldown = {"reasonCode": "provider-human-check", "retryAfterSeconds": 30}
        day.ok(B, "cooldown", {"machineId": "studio-b", "ticketId": b1, **cooldown})
        pause = day.ok(READER, "status", {})["pause"]
        assert pause["credential"] == "studio-b"
        day.ok(B, "release", {"machineId": "studio-b", "ticketId": b1, "outcome": "not-submitted"})
        # B asks again for A's next render while A holds it queued: a collision, B's
        a2 = day.acquire(A, "film", "a2")["ticket"]["ticketId"]
        assert day.acquire(B, "film", "a2")["duplicate"] is True
        # C's driver was killed: the operator releases its queued ticket by hand
        day.ok(OPS, "release", {"machineId": "studio-c", "ticketId": c1})
        # refusals change nothing and record nothing
        assert day.call(C, "release", {"machineId": "studio-a", "ticketId": a2})[0] == 403
        assert day.call(READER, "acquire", {"machineId": "x", "project": "p", "scene": "s",
                                            "promptHash": "h"})[0] == 403  # fmt: skip
        day.ok(A, "release", {"machineId": "studio-a", "ticketId": a2, "outcome": "failed"})

        log = {e["ticketId"]: e for e in day.ok(READER, "history", {})["entries"]}
        assert {t: (e["credential"], e["releasedBy"]) for t, e in log.items()} == {
            a1: ("studio-a", "studio-a"),
            b1: ("studio-b", "studio-b"),
            c1: ("studio-c", "ops"),  # the hand release
            a2: ("studio-a", "studio-a"),
        }
        st = day.ok(READER, "status", {"includeReceipts": True})
        assert [(r["ticketId"], r["credential"]) for r in st["recentReceipts"]] == [
            (b1, "studio-b"), (a1, "studio-a"), (a1, "studio-a"), (a1, "studio-a"),
        ]  # fmt: skip
        incidents = day.get(READER, f"/v1/incidents?lane={LANE}")["incidents"]
        assert sorted((i["kind"], i["credential"]) for i in incidents) == [
            ("duplicate-collision", "studio-b"),
            ("provider-cooldown-started", "studio-b"),
            ("receipt-hash-mismatch", "studio-b"),
        ]
        overview = day.get(READER, "/v1/overview")
        assert {e["ticketId"]: e["releasedBy"] for e in overview["log"]["entries"]}[c1] == "ops"
        day.get(READER, f"/v1/evidence?lane={LANE}&ticketId={a1}")
    finally:
        assert srv.stop() == 0

    # the lane file itself
    lane_file = data / "solo+main.sqlite"
    tickets = dict(
        (t, (c, r))
        for t, c, r in _rows(lane_file, "SELECT ticket_id, credential, released_by FROM tickets")
    )
    assert tickets[c1] == ("studio-c", "ops") and tickets[a1] == ("studio-a", "studio-a")
    receipts = _rows(lane_file, "SELECT machine_id, credential FROM receipts")
    assert sorted(set(receipts)) == [("studio-a", "studio-a"), ("studio-b", "studio-b")]
    stored = _rows(lane_file, "SELECT kind, credential FROM incidents")
    assert all(cred == "studio-b" for _, cred in stored) and len(stored) == 3

    # every lane log line of a write names its credential
    lines = [json.loads(ln) for ln in srv.lines if ln.startswith("{")]
    writes = [ln for ln in lines if ln["event"] in ("lane.receipt", "lane.incident")]
    assert writes and all(ln["credential"] in ("studio-a", "studio-b") for ln in writes)
    done = {ln["ticket"]: ln["credential"] for ln in lines
            if ln["event"] == "lane.ticket" and ln["state"] == "done"}  # fmt: skip
    assert done[c1] == "ops" and done[a1] == "studio-a" and done[b1] == "studio-b"
    made = [ln for ln in lines if ln["event"] == "lane.ticket" and ln["ticket"] == c1]
    assert made[0]["credential"] == "studio-c"  # its acquire
    [paused] = [ln for ln in lines if ln["event"] == "lane.pause" and ln["until"]]
    assert paused["credential"] == "studio-b"

    # a token's secret never appears anywhere
    everything = "\n".join(srv.lines) + "\n".join(day.replies)
    files = b"".join(p.read_bytes() for p in data.rglob("*") if p.is_file())
    for cred in EVERYONE:
        assert cred.token not in everything, cred.name
        assert cred.token.encode() not in files, cred.name
