"""`lane-coordinator backup` against a RUNNING server with live writes, then the
documented restore: stop, copy the files back, `lane-coordinator check`, start."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

from coordinator.protocol.constants import STATUS_QUEUED_LIMIT
from coordinator.store.sqlite import SqliteLaneStore
from tests.harness import CoordinatorProcess, cli, write_config, write_token_file

TOKEN = "backup-test-token-0123456789-abcdefghijklmnop"
LANES = ("solo:main", "duo:main")


class Writer(threading.Thread):
    """Acquire + release in a loop on every lane; records each acknowledged ticket."""

    def __init__(self, srv: CoordinatorProcess) -> None:
        super().__init__(daemon=True)
        self.srv = srv
        self.acked: list[tuple[str, str]] = []  # (lane, ticketId), in acknowledgement order
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        i = 0
        try:
            while not self.stop.is_set():
                for lane in LANES:
                    body = {"lane": lane, "machineId": "mW", "claimId": "cW", "project": "p",
                            "scene": f"s{i}", "promptHash": "h"}  # fmt: skip
                    got = self.srv.op("acquire", body, TOKEN)
                    tid = got["ticket"]["ticketId"]
                    with self.lock:
                        self.acked.append((lane, tid))
                    if i % 3:  # leave every third ticket live (queued or held)
                        rel = {"lane": lane, "machineId": "mW", "claimId": "cW",
                               "ticketId": tid, "outcome": "completed"}  # fmt: skip
                        self.srv.op("release", rel, TOKEN)
                i += 1
        except BaseException as exc:
            self.error = exc

    def snapshot(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.acked)


def tickets_in(path: Path, lane: str) -> set[str]:
    """Open a lane file the way the server does and read every ticket it holds."""
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = SqliteLaneStore(path, lane)
    store.open()
    try:
        snap = store.load()
        ended = store.history(5000, None)
    finally:
        store.close()
    return {t.ticket_id for t in snap.live} | {t.ticket_id for t in ended}


def queued_in(path: Path) -> list[str]:
    """The lane file's queued tickets, in queue order (by seq)."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT ticket_id FROM tickets WHERE state = 'queued' ORDER BY seq")
        return [r[0] for r in rows]


def test_online_backup_is_consistent_and_restores(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    write_token_file(token_file, TOKEN)
    config = write_config(tmp_path / "config.toml")
    data = tmp_path / "data"
    srv = CoordinatorProcess(data, token_file, config)
    writer = Writer(srv)
    try:
        writer.start()
        backups: list[tuple[Path, list[tuple[str, str]]]] = []
        for n in range(3):
            # Wait for more writes, so every backup is taken mid-stream.
            while len(writer.snapshot()) < 30 * (n + 1) and writer.error is None:
                writer.join(timeout=0.05)
            assert writer.error is None, writer.error
            before = writer.snapshot()
            dest = tmp_path / f"backup{n}"
            done = cli("backup", str(dest), "--data-dir", str(data))
            assert done.returncode == 0, done.stderr
            assert "backed up 2 lane files" in done.stdout
            backups.append((dest, before))
        writer.stop.set()
        writer.join(timeout=60)
        assert writer.error is None, writer.error
        assert srv.proc.poll() is None  # the server never stopped
    finally:
        writer.stop.set()
        code = srv.stop()
    assert code == 0

    for dest, before in backups:
        assert sorted(p.name for p in dest.iterdir()) == ["duo+main.sqlite", "solo+main.sqlite"]
        for lane in LANES:
            copy = dest / (lane.replace(":", "+") + ".sqlite")
            have = tickets_in(copy, lane)
            acked = {tid for ln, tid in before if ln == lane}
            assert acked <= have, f"{lane}: {len(acked - have)} acknowledged tickets missing"

    # Restore the last backup: server stopped, files copied back, check, start.
    dest, before = backups[-1]
    restored = tmp_path / "restored"
    restored.mkdir()
    for f in dest.iterdir():
        shutil.copy2(f, restored / f.name)
    checked = cli("check", "--data-dir", str(restored), "--config", str(config),
                  "--token-file", str(token_file))  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert "migrations apply cleanly to 2 lane files" in checked.stdout
    srv2 = CoordinatorProcess(restored, token_file, config)
    try:
        for lane in LANES:
            copy = dest / (lane.replace(":", "+") + ".sqlite")
            expected = tickets_in(copy, lane)
            queued = queued_in(copy)
            hist = srv2.op("history", {"lane": lane, "limit": 5000}, TOKEN)
            status = srv2.op("status", {"lane": lane}, TOKEN)
            # status lists at most STATUS_QUEUED_LIMIT queued tickets, in queue order, and
            # counts them all: the unlisted rest must be exactly the file's later ones
            listed = [t["ticketId"] for t in status["queued"]]
            assert listed == queued[:STATUS_QUEUED_LIMIT]
            assert status.get("queuedTotal", len(listed)) == len(queued)
            served = {e["ticketId"] for e in hist["entries"]}
            served |= {t["ticketId"] for t in status["held"]} | set(queued)
            assert served == expected
            assert {tid for ln, tid in before if ln == lane} <= served
    finally:
        assert srv2.stop() == 0


def test_backup_refuses_the_data_dir_itself(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    done = cli("backup", str(data), "--data-dir", str(data))
    assert done.returncode != 0
    assert "must not be the data dir" in done.stderr
