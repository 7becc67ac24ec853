"""`scripts/drill-netns.sh` (what `make drill-netns` runs): the drill over real veth links in
three network namespaces, plus step 8 (B's link cut mid-lease). Where network namespaces cannot
be made (not root, no CAP_SYS_ADMIN, no iproute2) the script itself says so — it exits 0 with
"SKIPPED: <reason>" and nothing else — and this test checks exactly that; everywhere else it
requires every step of both roles to pass and the namespaces to be gone afterwards."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.drill.kit import BIN, REPO, assert_steps_passed, clean_env, step7_numbers


def _namespaces() -> set[str]:
    ip = shutil.which("ip")
    if ip is None:
        return set()
    run = subprocess.run([ip, "netns", "list"], capture_output=True, text=True, check=False)
    return {line.split()[0] for line in run.stdout.splitlines() if line.strip()}


def test_drill_over_network_namespaces_with_a_cut_link(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    env.update(BIN=str(BIN), DRILL_TIMEOUT="120", TMPDIR=str(tmp_path))
    before = _namespaces()
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "drill-netns.sh")],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    skipped = re.fullmatch(r"SKIPPED: (.+)\n", run.stdout)
    if skipped is not None:
        # The only exit-0-without-drill path: a printed reason, and no drill ran at all.
        print(f"drill-netns not run here: {skipped.group(1)}")
        reason = skipped.group(1)
        assert "netns" in reason or "iproute2" in reason or "veth" in reason
        assert "PASS" not in out
        return
    assert_steps_passed(run.stdout, 8)  # the summary: both roles' PASS lines, prefixed
    step7_numbers(run.stdout)
    assert "FAIL" not in out
    assert "B's link cut: ip -n" in out and "B's link restored: ip -n" in out
    assert "refreshed=false (expired) 3/3" in out
    assert "parked as lease-lost" in out
    assert "history: outcome expired, lateOutcome lease-lost" in out
    assert re.search(r"A uses http://10\.231\.1\.1:\d+, B uses http://10\.231\.2\.1:\d+", out)
    assert "netns: PASSED" in run.stdout
    # Cleaned up: no namespace of this run is left, nor its temp dir.
    # Only this run's namespaces count: another run may be going on beside this one.
    named = re.search(r"^netns: namespaces (\S+) (\S+) (\S+)$", run.stdout, re.M)
    assert named is not None, out
    leftover = set(named.groups()) & (_namespaces() - before)
    assert not leftover, leftover
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("lane-drill-netns.")]


def _tools(tmp: Path, fake_ip: str | None) -> str:
    """A PATH with the few tools the script needs before its capability check, plus an `ip`
    that behaves as told (None: no `ip` at all)."""
    bin_dir = tmp / "path"
    bin_dir.mkdir()
    for tool in ("dirname", "mktemp", "cat", "sed"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    if fake_ip is not None:
        ip = bin_dir / "ip"
        ip.write_text(f"#!/bin/sh\n{fake_ip}\n", encoding="utf-8")
        ip.chmod(0o755)
    return str(bin_dir)


def test_skips_with_a_printed_reason_only_when_namespaces_cannot_be_made(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    cases = {
        "no-ip": (None, "`ip` (iproute2) is not installed"),
        "denied": (
            'echo "mount --make-shared /run/netns failed: Operation not permitted" >&2; exit 1',
            "`ip netns add` is not permitted here: mount --make-shared /run/netns failed: "
            "Operation not permitted",
        ),
    }
    for name, (fake, reason) in cases.items():
        case = tmp_path / name
        case.mkdir()
        env = clean_env(case)
        env.update(BIN=str(BIN), PATH=_tools(case, fake))
        run = subprocess.run(
            [bash, str(REPO / "scripts" / "drill-netns.sh")],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert run.returncode == 0, (name, run.stdout, run.stderr)
        assert run.stdout.startswith(f"SKIPPED: {reason}"), (name, run.stdout, run.stderr)
        assert "PASS" not in run.stdout


def test_a_failing_drill_is_not_reported_as_skipped(tmp_path: Path) -> None:
    """When the drill itself cannot run (here: the coordinator binary fails to start) the script
    exits 1 — never "SKIPPED" — and removes the namespaces it made. (Where namespaces cannot be
    made at all, the capability check answers first: SKIPPED with its reason.)"""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python").symlink_to(BIN / "python")
    (fake_bin / "lane-coordinator").write_text("#!/bin/sh\necho 'no coordinator' >&2\nexit 1\n")
    (fake_bin / "lane-coordinator").chmod(0o755)
    env = clean_env(tmp_path)
    env.update(BIN=str(fake_bin), TMPDIR=str(tmp_path))
    before = _namespaces()
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "drill-netns.sh")],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if run.stdout.startswith("SKIPPED: "):
        assert run.returncode == 0 and "PASS" not in run.stdout
        print(run.stdout.strip())
        return
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert "SKIPPED" not in run.stdout
    assert "the coordinator did not start" in run.stderr and "no coordinator" in run.stderr
    assert not {ns for ns in _namespaces() - before if ns.startswith("ld")}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("lane-drill-netns.")]
