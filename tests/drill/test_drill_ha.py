"""The drill across replicas: `scripts/drill-ha.sh` (what `make drill-ha` runs) — a throwaway
PostgreSQL cluster in a temp dir, `lane-coordinator migrate`, two `serve --store` replicas
with the same token file and config, role A talking only to replica 1 and role B only to
replica 2 — passes every step (the hand-off, B's parked await woken by A's release on the
other replica, the alarm, the receipts, and step 7's in-flight hold: B's waiter on replica 2
stays queued after A's lease expired, A's provider-terminal receipt through replica 1 promotes
it); afterwards neither lane holds a live ticket and both
replicas answer as `actor-postgres` with the same receipt trail. The teardown (roles,
replicas, PostgreSQL, temp dir) happens on success, on failure and on Ctrl-C.

Each run starts its own cluster (initdb included): `make test` runs scripts/ensure-postgres.sh
first, so the server binaries are there on a fresh machine."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.drill.kit import (
    BARRIER,
    BIN,
    LANE,
    REPO,
    assert_steps_passed,
    clean_env,
    step7_numbers,
)
from tests.harness import LineProcess

SCRIPT = REPO / "scripts" / "drill-ha.sh"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = clean_env(tmp_path)
    env.update(BIN=str(BIN), DRILL_TIMEOUT="120", TMPDIR=str(tmp_path), **extra)
    return env


def _gone(pid: int) -> bool:
    """Not running (a zombie waiting for its parent counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    return fields[0] in ("Z", "X")


def _setup(out: str) -> tuple[Path, list[int], list[str]]:
    """The temp dir, the pids (PostgreSQL, replica 1, replica 2) and the replicas' URLs the
    script printed."""
    m = re.search(r"^drill: fresh PostgreSQL on 127\.0\.0\.1:\d+ \(pid (\d+), cluster (\S+)/pg\)"
                  r", migrated$", out, re.M)  # fmt: skip
    assert m, out
    replicas = re.findall(
        r"^drill: replica-[12] at (http://127\.0\.0\.1:\d+) \(pid (\d+), ", out, re.M
    )
    assert len(replicas) == 2, out
    urls = [u for u, _ in replicas]
    assert len(set(urls)) == 2, urls
    return Path(m.group(2)), [int(m.group(1)), *(int(p) for _, p in replicas)], urls


def _assert_torn_down(work: Path, pids: list[int], urls: list[str]) -> None:
    """Nothing of the run is left: the temp dir (cluster, token, pgpass) is removed, the
    postmaster and both replicas have exited, the replicas' ports answer no more."""
    assert not work.exists(), sorted(p.name for p in work.iterdir())
    deadline = time.monotonic() + 15  # pg_ctl stop -w returns as the postmaster exits
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in pids if not _gone(p)] == [], pids
    for url in urls:
        try:
            urllib.request.urlopen(url + "/healthz", timeout=5)
        except urllib.error.URLError:
            continue
        raise AssertionError(f"{url} still answers after the teardown")


def test_make_drill_ha_passes_across_two_replicas_and_leaves_nothing(tmp_path: Path) -> None:
    run = subprocess.run(
        ["bash", str(SCRIPT)], env=_env(tmp_path), cwd=REPO,
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    work, pids, (url1, url2) = _setup(out)
    assert_steps_passed(out, 7)
    # Role A talks to replica 1 only, role B to replica 2 only.
    assert f"drill: lane {LANE}; role A -> replica-1 {url1}, role B -> replica-2 {url2}" in out
    for role in ("A", "B"):
        # Each role's own replica answered as the replicas' kind, not as a single server.
        assert re.search(rf"^\[{role}\] .*\[{role}\] role {role} as machine "
                         rf"drill-computer-{role.lower()} \(claim [^)]+\); actor-postgres, "
                         rf"{re.escape(LANE)} enforced, capacity 1;", out, re.M), out  # fmt: skip
        assert f"[{role}] drill passed: role {role} on {LANE}" in out
        assert re.search(rf"^\[{role}\] PASS  cleanup  \[{role}\] released (\d+) of \1 drill "
                         r"tickets and (\d+) of \2 barrier tickets", out, re.M), out  # fmt: skip
    assert "FAIL" not in out
    assert f"drill: after: {LANE} held 0 queued 0" in out
    assert f"drill: after: {BARRIER} held 0 queued 0" in out
    # Read through each replica afterwards: both are actor-postgres and agree: B's receipt
    # (written through replica 2) is on record once, A's two of step 7 (through replica 1).
    for n, url in ((1, url1), (2, url2)):
        assert (f"drill: replica-{n} {url} answers as actor-postgres: {LANE} held 0 queued 0, "
                "3 receipt(s)") in out, out  # fmt: skip
    assert "drill: PASSED" in out
    # Timings the roles observed across replicas: B's parked await (on replica 2) woken by
    # A's release (on replica 1), and the alarm promoting B's waiter after A's lease expired.
    assert re.search(r"the parked await answered \d+ ms after the grant", out)
    assert re.search(r"the alarm promoted it \d+ ms after expiry", out)
    assert re.search(r"parked in one await \d+\.\d s", out)
    stayed, receipt_ms, wake_ms = step7_numbers(out)
    print(f"step 7 (two replicas): B not promoted for {stayed} s after A's lease expired; "
          f"granted in the receipt's commit ({receipt_ms:.0f} ms call through replica 1), B's "
          f"await on replica 2 answered {wake_ms:.0f} ms after the grant")  # fmt: skip
    # Two machines, two claims.
    assert "partner B is machine drill-computer-b" in out
    assert "partner A is machine drill-computer-a" in out
    _assert_torn_down(work, pids, [url1, url2])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("lane-drill-ha.")]


def test_a_failed_drill_ha_still_tears_everything_down(tmp_path: Path) -> None:
    """Both roles refuse an unenforced lane: FAILED, exit 1, and the same clean teardown."""
    run = subprocess.run(
        ["bash", str(SCRIPT)], env=_env(tmp_path, DRILL_LANE="free-route:acceptance"),
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "drill: FAILED (role A exit 1, role B exit 1" in out, out
    assert "PASS  step" not in out and "drill: PASSED" not in out
    work, pids, urls = _setup(out)
    _assert_torn_down(work, pids, urls)


def test_ctrl_c_mid_drill_ha_releases_and_tears_everything_down(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) once the roles are
    under way: the roles release their tickets through the still-running replicas, then the
    replicas, PostgreSQL and the temp dir go; exit 130."""
    run = LineProcess(  # its own process group
        ["bash", str(SCRIPT)], _env(tmp_path), sigint_default=True
    )
    try:
        run.wait_for_line(lambda ln: "PASS  step 1/7" in ln, 180)
        os.killpg(run.pid, signal.SIGINT)
        assert run.wait(120) == 130, run.text
    finally:
        if run.proc.poll() is None:
            os.killpg(run.pid, signal.SIGTERM)
            run.wait(60)
    out = run.text
    for role in ("A", "B"):
        assert f"[{role}] lane: drill interrupted — releasing every ticket of role {role}" in out
        assert re.search(rf"^\[{role}\] PASS  cleanup  \[{role}\] released (\d+) of \1 drill "
                         r"tickets and (\d+) of \2 barrier tickets", out, re.M), out  # fmt: skip
    assert "drill: PASSED" not in out
    work, pids, urls = _setup(out)
    _assert_torn_down(work, pids, urls)
