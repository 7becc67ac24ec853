"""The simulated disk itself: what it keeps and drops at a power loss (shim.c, disk.py).

A child process runs under the shim and is killed with SIGKILL; `power_loss` then turns the
directory into the disk's image. Rules checked: a write not followed by an fsync of its file
is lost; a created, renamed or removed name not followed by an fsync of the directory is
undone; a truncation is undone unless synced; a synced write survives. And with real SQLite
(WAL): synchronous=FULL keeps every commit that returned, NORMAL and OFF do not.
"""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import REPO
from tests.powerloss.disk import PAGE, ShimRun

PRE_EXISTING = {
    "a": b"A0" * 100,
    "d": b"D0",
    "f": b"F0",
    "h": b"h" * 3 * PAGE,
    "t": b"T0" * 10,
}


def _run_child(run: ShimRun, *args: str) -> list[str]:
    """Start `python -m tests.powerloss.child ARGS` on the shim; SIGKILL it once it says
    "ready"; returns its lines."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.powerloss.child", *args],
        env=run.env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("ready"):
                break
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert lines and lines[-1] == "ready", lines
    return lines


def _files_run(shim_lib: Path, tmp_path: Path) -> ShimRun:
    run = ShimRun(shim_lib, tmp_path / "disk", tmp_path / "state")
    run.directory.mkdir(parents=True)
    for name, data in PRE_EXISTING.items():
        (run.directory / name).write_bytes(data)
    _run_child(run, "files", str(run.directory))
    assert run.anomalies() == []
    return run


def test_power_loss_keeps_exactly_what_was_synced(shim_lib: Path, tmp_path: Path) -> None:
    run = _files_run(shim_lib, tmp_path)
    stats = run.stats()
    assert (stats.starts, stats.file_syncs) == (1, 3)  # c, h, b
    assert stats.dir_syncs == 3  # the start's snapshot, then the child's two
    d = run.directory
    assert (d / "c").read_bytes().endswith(b"more")  # the page cache (kill -9) has it all
    rec = run.power_loss("drop")
    got = {p.name: p.read_bytes() for p in d.iterdir()}
    assert got == {
        "a": b"A0" * 100,  # overwritten, never synced: the old content
        "c": b"C0" * 100,  # synced, then appended: the append is gone
        "d": b"D0",  # removed, the directory never synced: back
        "e": b"",  # named durably (a later dir sync), content never synced: empty
        "f": b"F0",  # renamed to g, the directory never synced: the old name
        "h": b"\0" * 2 * PAGE + b"H1" * (PAGE // 2),  # truncated + written + synced
        "t": b"T0" * 10,  # truncated by open, never synced: the old content
    }
    # b was created and fsynced, but its directory entry never was: gone with its data
    assert rec.vanished == ["b", "g"]
    assert rec.resurrected == ["d", "f"]
    assert oct((d / "c").stat().st_mode & 0o777) == oct(0o600)


def test_torn_power_loss_keeps_some_unsynced_pages(shim_lib: Path, tmp_path: Path) -> None:
    """In "torn" mode each unsynced page is the disk's or the page cache's, nothing else."""
    seen: set[bytes] = set()
    for seed in range(8):
        run = _files_run(shim_lib, tmp_path / str(seed))
        run.power_loss("torn", random.Random(seed))
        a = (run.directory / "a").read_bytes()
        assert a in (b"A0" * 100, b"A1" * 100)
        seen.add(a)
        c = (run.directory / "c").read_bytes()
        assert c in (b"C0" * 100, b"C0" * 100 + b"more", b"C0" * 100 + b"\0" * 4)
        assert not (run.directory / "b").exists()  # names are the disk's, in torn mode too
    assert len(seen) == 2  # both outcomes happen


@pytest.mark.parametrize(("sync", "loses"), [("FULL", False), ("NORMAL", True), ("OFF", True)])
def test_sqlite_commits_survive_only_when_fsynced(
    shim_lib: Path, tmp_path: Path, sync: str, loses: bool
) -> None:
    """Real SQLite in WAL mode, killed after 137 commits returned. FULL: every commit
    that returned survives a power loss (drop and torn), the file passes integrity_check.
    NORMAL and OFF (no fsync per commit): the power loss takes commits that returned: the
    simulator detects what kill -9 cannot."""
    for mode in ("drop", "torn"):
        run = ShimRun(shim_lib, tmp_path / mode / "disk", tmp_path / mode / "state")
        lines = _run_child(run, "sqlite", str(run.directory), sync, "137")
        acked = max(int(ln.split()[1]) for ln in lines if ln.startswith("acked"))
        assert acked == 137
        assert run.anomalies() == []
        before = sqlite3.connect(run.directory / "x.db")  # what kill -9 leaves: all of it
        assert before.execute("SELECT count(*) FROM t").fetchone() == (acked,)
        before.close()
        run.power_loss(mode, random.Random(1))
        db = sqlite3.connect(run.directory / "x.db")
        try:
            rows = db.execute("SELECT count(*) FROM t").fetchone()[0]
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        except sqlite3.OperationalError as exc:  # the table itself never reached the disk
            assert loses, exc
            rows = 0
        finally:
            db.close()
        if loses:
            assert rows < acked, f"synchronous={sync}: the power loss lost nothing ({mode})"
        else:
            assert rows == acked, f"synchronous=FULL lost {acked - rows} commits ({mode})"
