"""The `lane` CLI as a subprocess against the real coordinator: JSON, tables, exit codes."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from client.sync import SyncLaneClient
from tests.client.kit import LANE_BIN, REPO, STUDIO_B, lane, shared_env
from tests.harness import AppThread, ThreadedCoordinator
from tests.harness.config import client_env

LANE = "render:main"
IDENT = ["--project", "p", "--scene", "s1", "--prompt-hash", "h1"]


def no_secret(server: ThreadedCoordinator, *texts: str) -> None:
    for t in texts:
        assert server.token not in t


def test_json_commands_and_exit_codes(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str], tmp_path: Path
) -> None:
    a = shared_env(lane_env, coordinator, "studio-a")
    b = shared_env(lane_env, coordinator, "studio-b")
    acq = lane("acquire", "--lane", LANE, *IDENT, "--json", env=a)
    assert acq.code == 0, acq.err
    ra = acq.json()
    assert ra["coordinator"] == "actor-sqlite" and ra["granted"] and ra["ticket"]["state"] == "held"
    ta = ra["ticket"]["ticketId"]

    acq_b = lane("acquire", "--route", "render", "--account", "main", "--project", "p",
                 "--scene", "s2", "--prompt-hash", "h2", "--json", env=b)  # fmt: skip
    assert acq_b.code == 0
    rb = acq_b.json()
    assert not rb["granted"] and rb["ticket"]["position"] == 1
    tb = rb["ticket"]["ticketId"]

    b_acct = dict(b, LANE_ACCOUNT="main")
    st = lane("status", "--route", "render", "--json", env=b_acct)
    assert st.code == 0
    body = st.json()
    assert [t["ticketId"] for t in body["held"]] == [ta]
    assert [t["ticketId"] for t in body["queued"]] == [tb]
    assert "recentReceipts" not in body

    hb = lane("heartbeat", "--lane", LANE, "--ticket", ta, "--json", env=a)
    assert hb.code == 0 and hb.json()["refreshed"] is True
    hb_q = lane("heartbeat", "--lane", LANE, "--ticket", tb, "--json", env=b)
    assert hb_q.code == 1 and hb_q.json()["reason"] == "not-held"

    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"refs": ["sha256:aa"], "count": 1}))
    rec = lane("receipt", "--lane", LANE, "--ticket", ta, "--phase", "references-applied",
               "--payload-file", str(payload), "--json", env=a)  # fmt: skip
    assert rec.code == 0, rec.err
    r1 = rec.json()
    assert r1["stored"] is True and r1["contentHashVerified"] is True
    assert r1["receiptId"].startswith(f"{ta}:references-applied:")
    again = lane("receipt", "--lane", LANE, "--ticket", ta, "--phase", "references-applied",
                 "--payload-file", "-", "--json", env=a,
                 stdin=json.dumps({"count": 1, "refs": ["sha256:aa"]}))  # fmt: skip
    assert again.code == 0 and again.json()["replay"] is True
    not_holder = lane("receipt", "--lane", LANE, "--ticket", ta, "--phase", "provider-terminal",
                      "--payload-file", str(payload), env=b)  # fmt: skip
    assert not_holder.code == 1 and "not-holder" in not_holder.err

    verbose = lane("status", "--lane", LANE, "--verbose", "--json", env=a).json()
    assert verbose["unreadableReceipts"] == 0 and len(verbose["recentReceipts"]) == 1

    cd = lane("cooldown", "--lane", LANE, "--ticket", ta, "--retry-after", "45", "--json", env=a)
    assert cd.code == 0, cd.err
    pause = cd.json()["pause"]
    assert pause["reasonCode"] == "provider-human-check" and pause["machineId"] == "studio-a"
    assert 44 <= pause["until"] - pause["startedAt"] <= 46
    cd_q = lane("cooldown", "--lane", LANE, "--ticket", tb, env=b)
    assert cd_q.code == 1 and "ticket-not-held" in cd_q.err

    rel = lane("release", "--lane", LANE, "--ticket", ta, "--outcome", "not-submitted",
               "--provider-job", "job-9", "--note", "human check", "--json", env=a)  # fmt: skip
    assert rel.code == 0 and rel.json()["released"] is True
    rel2 = lane("release", "--lane", LANE, "--ticket", ta, "--json", env=a)
    assert rel2.code == 1 and rel2.json()["reason"] == "already-done"

    hist = lane("history", "--lane", LANE, "--limit", "5", "--project", "p", "--json", env=a)
    assert hist.code == 0
    h = hist.json()
    assert h["entries"][0]["ticketId"] == ta and h["entries"][0]["providerJobId"] == "job-9"
    assert h["counts"] == {"not-submitted": 1}

    # paused lane: b is still queued; a hand release (no claim) from b's machine ends it.
    aw = lane("await", "--lane", LANE, "--ticket", tb, "--wait", "1", "--max-wait", "1",
              "--json", env=b)  # fmt: skip
    assert aw.code == 1 and aw.json()["ticket"]["state"] == "queued"
    assert "still queued" in aw.err
    end = lane("release", "--lane", LANE, "--ticket", tb, env=b)
    assert end.code == 0 and "released   yes" in end.out
    for r in (acq, acq_b, st, hb, rec, cd, rel, hist, aw, end):
        no_secret(coordinator, r.out, r.err)


def test_reconcile_ends_an_in_flight_job_and_promotes(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str]
) -> None:
    a = shared_env(lane_env, coordinator, "studio-a")
    b = shared_env(lane_env, coordinator, "studio-b")
    ta = lane("acquire", "--lane", LANE, *IDENT, "--json", env=a).json()["ticket"]["ticketId"]
    tb = lane("acquire", "--lane", LANE, "--project", "p", "--scene", "s2", "--prompt-hash", "h2",
              "--json", env=b).json()["ticket"]["ticketId"]  # fmt: skip
    job = json.dumps({"providerJobId": "job-1"})
    sub = lane("receipt", "--lane", LANE, "--ticket", ta, "--phase", "provider-submitted",
               "--payload-file", "-", env=a, stdin=job)  # fmt: skip
    assert sub.code == 0, sub.err
    lost = lane("release", "--lane", LANE, "--ticket", ta, "--outcome", "lease-lost", env=a)
    assert lost.code == 0, lost.err
    st = lane("status", "--lane", LANE, "--json", env=a).json()
    assert [j["ticketId"] for j in st["inFlight"]] == [ta] and st["held"] == []

    bad = lane("reconcile", "--lane", LANE, "--ticket", ta, "--outcome", "done", env=a)
    assert bad.code == 2  # not an outcome: usage
    # another machine's driver credential (an admin may reconcile any machine's ticket)
    b_driver = client_env(lane_env, coordinator.url, STUDIO_B.token, "studio-b")
    other = lane("reconcile", "--lane", LANE, "--ticket", ta, "--outcome", "completed",
                 env=b_driver)  # fmt: skip
    assert other.code == 1 and "not-owner" in other.err
    rc = lane("reconcile", "--lane", LANE, "--ticket", ta, "--outcome", "completed",
              "--provider-job-id", "job-1", "--note", "seen in the dashboard", "--json",
              env=a)  # fmt: skip
    assert rc.code == 0, rc.err
    assert rc.json()["reconciled"] is True and rc.json()["promoted"] == [tb]
    again = lane("reconcile", "--lane", LANE, "--ticket", ta, "--outcome", "completed", env=a)
    assert again.code == 1 and "not-in-flight" in again.err
    table = lane("reconcile", "--lane", LANE, "--ticket", "t_nope", "--outcome", "failed", env=a)
    assert table.code == 1 and "not-found" in table.err
    hist = lane("history", "--lane", LANE, "--json", env=a).json()
    row = next(e for e in hist["entries"] if e["ticketId"] == ta)
    assert row["inFlightEnded"] == "reconciled:completed"
    for r in (sub, lost, rc, again):
        no_secret(coordinator, r.out, r.err)


def test_tables_are_readable(coordinator: ThreadedCoordinator, lane_env: dict[str, str]) -> None:
    env = shared_env(lane_env, coordinator)
    acq = lane("acquire", "--lane", LANE, *IDENT, env=env)
    assert acq.code == 0 and "held (granted to you)" in acq.out
    tid = acq.out.split()[1]
    st = lane("status", "--lane", LANE, "--verbose", env=env)
    assert st.code == 0 and tid in st.out and "STATE" in st.out and "capacity 1" in st.out
    assert "unreadable receipts: 0" in st.out
    assert re.search(r"eta error  ±\d+\S* median, p90 \d+\S* \(last \d+ grants?\)", st.out)
    aw = lane("await", "--lane", LANE, "--ticket", tid, env=env)
    assert aw.code == 0 and "held (granted to you)" in aw.out
    lane("release", "--lane", LANE, "--ticket", tid, "--outcome", "completed", env=env)
    hist = lane("history", "--lane", LANE, env=env)
    assert hist.code == 0 and "completed" in hist.out and "counts: completed 1" in hist.out


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["status"],  # no lane
        ["status", "--lane", "Not A Lane"],
        ["status", "--lane", "render:main", "--route", "render"],
        ["status", "--route", "render"],  # no account anywhere (not required)
        ["release", "--lane", LANE],  # no --ticket
        ["release", "--lane", LANE, "--ticket", "t_x", "--outcome", "bogus"],
        ["await", "--lane", LANE, "--ticket", "t_x", "--wait", "100"],
        ["acquire", "--lane", LANE, "--project", "p"],
        ["receipt", "--lane", LANE, "--ticket", "t", "--phase", "nope", "--payload-file", "x"],
        ["history", "--lane", LANE, "--limit", "many"],
        ["frobnicate"],
    ],
)
def test_usage_errors_exit_2(lane_env: dict[str, str], args: list[str]) -> None:
    r = lane(*args, env=lane_env)
    assert r.code == 2, (args, r.code, r.err)
    assert "usage" in r.err.lower() and r.out == ""


def test_bad_payload_file_is_usage(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    r = lane("receipt", "--lane", LANE, "--ticket", "t_x", "--phase", "lease-acquired",
             "--payload-file", str(bad), env=shared_env(lane_env, coordinator))  # fmt: skip
    assert r.code == 2 and "JSON object" in r.err


def test_receipt_refuses_a_prompt_looking_payload_before_sending(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str], tmp_path: Path
) -> None:
    env = shared_env(lane_env, coordinator)
    t = lane("acquire", "--lane", LANE, "--project", "p", "--scene", "rp", "--prompt-hash",
             "rp", "--json", env=env).json()["ticket"]["ticketId"]  # fmt: skip
    bad = tmp_path / "prompt.json"
    bad.write_text(json.dumps({"prompt": "a cat walking on the moon in the rain"}))
    r = lane("receipt", "--lane", LANE, "--ticket", t, "--phase", "lease-acquired",
             "--payload-file", str(bad), "--json", env=env)  # fmt: skip
    assert r.code == 2 and "prompt" in r.err, r.err
    st = lane("status", "--lane", LANE, "--verbose", "--json", env=env).json()
    assert not [x for x in st["recentReceipts"] if x["ticketId"] == t]  # nothing was sent
    lane("release", "--lane", LANE, "--ticket", t, "--outcome", "not-submitted", env=env)


@pytest.mark.parametrize(
    "args",
    [
        ["history", "--limit", "0"],
        ["acquire", "--project", "p", "--scene", "s", "--prompt-hash", "h",
         "--lease-seconds", "5"],
    ],
)  # fmt: skip
def test_values_the_coordinator_refuses_exit_2(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str], args: list[str]
) -> None:
    r = lane(*args[:1], "--lane", LANE, *args[1:], env=shared_env(lane_env, coordinator))
    assert r.code == 2 and "bad-request" in r.err, (r.code, r.err)


def test_await_prints_pause_once_and_lines_on_change(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str]
) -> None:
    with SyncLaneClient(coordinator.url, coordinator.token, "studio-a", "drv-a") as a:
        ra = a.acquire(LANE, "p", "1", "a")
        env_b = shared_env(lane_env, coordinator, "studio-b")
        tb = lane("acquire", "--lane", LANE, "--project", "p", "--scene", "2", "--prompt-hash",
                  "b", "--json", env=env_b).json()["ticket"]["ticketId"]  # fmt: skip
        a.cooldown(LANE, ra.ticket_id, 60)
        a.release(LANE, ra.ticket_id, "not-submitted")
        r = lane("await", "--lane", LANE, "--ticket", tb, "--wait", "1", "--max-wait", "4",
                 env=env_b)  # fmt: skip
    assert r.code == 1
    assert r.err.count("paused — provider-human-check reported by studio-a") == 1, r.err
    assert r.err.count("queued · position 1") == 1, r.err  # piped: only on change
    assert "still queued" in r.err
    assert "\r" not in r.err  # no live line when not a TTY


def test_await_returns_when_granted(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str]
) -> None:
    with SyncLaneClient(coordinator.url, coordinator.token, "studio-a", "drv-a") as a:
        ra = a.acquire(LANE, "p", "1", "a")
        env_b = shared_env(lane_env, coordinator, "studio-b")
        tb = lane("acquire", "--lane", LANE, "--project", "p", "--scene", "2", "--prompt-hash",
                  "b", "--json", env=env_b).json()["ticket"]["ticketId"]  # fmt: skip
        proc = subprocess.Popen(
            [str(LANE_BIN), "await", "--lane", LANE, "--ticket", tb, "--json"],
            env=env_b, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the waiter is parked and said so (piped: one line)
        assert "queued · position 1" in first, first
        a.release(LANE, ra.ticket_id, "completed")
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    body = json.loads(out)
    assert body["granted"] and body["ticket"]["state"] == "held"
    assert "queued" not in err  # no further progress line: the next answer was the grant


def test_trace_holds_logs_and_releases_on_sigint(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str]
) -> None:
    env = shared_env(lane_env, coordinator)
    proc = subprocess.Popen(
        [str(LANE_BIN), "trace", "--lane", LANE, "--interval", "0.5", "--json"],
        env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while sum(e["event"] == "heartbeat" for e in events) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        events.append(json.loads(line))
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    events += [json.loads(x) for x in rest.splitlines() if x.strip()]
    assert proc.returncode == 0, err
    assert events[0]["event"] == "acquire" and events[0]["granted"] is True
    tid = events[0]["ticket"]
    beats = [e for e in events if e["event"] == "heartbeat"]
    assert len(beats) >= 2 and all(b["refreshed"] for b in beats)
    assert all(any(tid in h for h in b["held"]) for b in beats)
    assert events[-1]["event"] == "release" and events[-1]["released"] is True
    with SyncLaneClient(coordinator.url, coordinator.token, "reader") as r:
        entry = r.history(LANE).entries[0]
        assert entry.ticket_id == tid and entry.outcome == "not-submitted"
        assert entry.claim_id == events[0]["claim"]  # trace mints a claim per process


def test_self_test_passes_on_fresh_coordinator(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str]
) -> None:
    env = shared_env(lane_env, coordinator)
    r = lane("self-test", env=env)
    assert r.code == 0, r.out + r.err
    lines = [x for x in r.out.splitlines() if x.startswith(("PASS", "FAIL"))]
    assert len(lines) == 8 and all(x.startswith("PASS") for x in lines), r.out
    for name in ("capacity-one serialization", "same-request dedupe", "heartbeat",
                 "atomic promotion", "receipt replay", "conflicting receipt rejected (409)",
                 "release every test ticket"):  # fmt: skip
        assert any(name in x for x in lines), name
    no_secret(coordinator, r.out, r.err)
    with SyncLaneClient(coordinator.url, coordinator.token, "reader") as c:
        st = c.status("self-test:self-test")
        assert st.held == [] and st.queued == []
        hist = c.history("self-test:self-test")
        assert len(hist.entries) == 3 and hist.counts == {"not-submitted": 3}
    again = lane("self-test", "--json", env=env)  # repeatable: it left the lane quiet
    assert again.code == 0 and json.loads(again.out)["ok"] is True


@pytest.mark.parametrize(
    ("extra_env", "args", "needle"),
    [
        ({"LANE_SELF_TEST_ACCOUNT": "main-unlimited"}, [], "main-unlimited"),
        ({"LANE_ACCOUNT": "studio", "LANE_SELF_TEST_ACCOUNT": "studio"}, [], "LANE_ACCOUNT"),
        ({}, ["--lane", "render:main-unlimited"], "production"),
        ({"LANE_ACCOUNT": "main"}, ["--lane", "render:main"], "LANE_ACCOUNT"),
    ],
)
def test_self_test_refuses_production_accounts(
    coordinator: ThreadedCoordinator,
    lane_env: dict[str, str],
    extra_env: dict[str, str],
    args: list[str],
    needle: str,
) -> None:
    env = dict(shared_env(lane_env, coordinator), **extra_env)
    r = lane("self-test", *args, env=env)
    assert r.code == 1 and "refuses" in r.err and needle in r.err, r.err
    with SyncLaneClient(coordinator.url, coordinator.token, "reader") as c:
        lanes = c.lanes().lanes  # nothing was acquired anywhere
        assert all(x.held == 0 and x.queued == 0 for x in lanes)
        assert {x.lane for x in lanes} <= {"render:wide"}  # only the configured lane


def test_self_test_fails_on_busy_or_unenforced_lane(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str]
) -> None:
    env = shared_env(lane_env, coordinator)
    with SyncLaneClient(coordinator.url, coordinator.token, "studio-x", "other") as c:
        busy = c.acquire("self-test:self-test", "real", "1", "x")
        r = lane("self-test", env=env)
        assert r.code == 1
        assert "FAIL  shared coordinator" in r.out and "not quiet" in r.out
        assert r.out.count("not run") == 6
        st = c.status("self-test:self-test")
        assert [t.ticket_id for t in st.held] == [busy.ticket_id] and st.queued == []
    r = lane("self-test", "--route", "free", env=env)
    assert r.code == 1 and "unenforced" in r.out


def test_self_test_needs_shared_coordinator(lane_env: dict[str, str]) -> None:
    r = lane("self-test", env=lane_env)
    assert r.code == 3 and "LANE_COORDINATOR_URL is unset" in r.err
    assert not Path(lane_env["LANE_STATE_DIR"]).exists()


def test_setup_enrols_and_checks(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str], fake: Callable[[str], AppThread]
) -> None:
    env = dict(lane_env)
    r = lane("setup", coordinator.url, "studio-m", "--account", "main", env=env,
             stdin=coordinator.token + "\n")  # fmt: skip
    assert r.code == 0, r.err
    assert '"coordinator": "actor-sqlite"' in r.out
    cdir = Path(env["LANE_CONFIG_DIR"])
    token_file, env_file = cdir / "token", cdir / "client.env"
    assert token_file.read_text().strip() == coordinator.token
    assert (token_file.stat().st_mode & 0o777) == 0o600
    assert (env_file.stat().st_mode & 0o777) == 0o600
    settings = env_file.read_text()
    assert f"LANE_COORDINATOR_URL={coordinator.url}" in settings
    assert "LANE_MACHINE_ID=studio-m" in settings and "LANE_REQUIRED=1" in settings
    assert "LANE_ACCOUNT=main" in settings and coordinator.token not in settings
    no_secret(coordinator, r.out, r.err)
    # Now every call works from the files alone (fail-closed, shared coordinator).
    st = lane("status", "--route", "render", "--json", env=env)
    assert st.code == 0 and st.json()["coordinator"] == "actor-sqlite", st.err
    # Loosened token file: refused; with LANE_REQUIRED=1 from client.env that is exit 3.
    os.chmod(token_file, 0o644)
    st = lane("status", "--route", "render", env=env)
    assert st.code == 3 and "chmod 600" in st.err


@pytest.mark.parametrize(
    ("kind", "needle"), [("wrong-token", "unauthorized"), ("local", "'local-sqlite'")]
)
def test_setup_reports_exact_reason(
    coordinator: ThreadedCoordinator,
    lane_env: dict[str, str],
    fake: Callable[[str], AppThread],
    kind: str,
    needle: str,
) -> None:
    url = coordinator.url if kind == "wrong-token" else fake("local").url
    token = "w" * 40
    r = lane("setup", url, "studio-m", env=dict(lane_env), stdin=token + "\n")
    assert r.code == 3 and needle in r.err, r.err
    assert token not in r.out + r.err
    bad = lane("setup", "ftp://x", "studio-m", env=dict(lane_env), stdin=token + "\n")
    assert bad.code == 2
    short = lane("setup", url, "studio-m", env=dict(lane_env), stdin="short\n")
    assert short.code == 1 and "at least 32" in short.err


def _fake_tools(tmp: Path, clipboard: bool) -> dict[str, str]:
    bindir = tmp / "bin"
    bindir.mkdir()
    if clipboard:
        xclip = bindir / "xclip"
        xclip.write_text(f'#!/bin/sh\necho "$@" > {tmp}/clip-args\ncat > {tmp}/clip\n')
        xclip.chmod(0o755)
    browser = bindir / "fake-browser"
    browser.write_text(f'#!/bin/sh\necho "$@" > {tmp}/browser-args\n')
    browser.chmod(0o755)
    return {"PATH": f"{bindir}:/usr/bin:/bin", "BROWSER": f"{browser} %s"}


def test_dashboard_copies_token_never_in_url_or_argv(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str], tmp_path: Path
) -> None:
    env = dict(shared_env(lane_env, coordinator), **_fake_tools(tmp_path, clipboard=True))
    r = lane("dashboard", env=env)
    assert r.code == 0, r.err
    assert (tmp_path / "clip").read_text() == coordinator.token
    assert coordinator.token not in (tmp_path / "clip-args").read_text()
    opened = (tmp_path / "browser-args").read_text().strip()
    assert opened == f"{coordinator.url}/control-room"
    assert r.out.strip() == opened and "clipboard (xclip)" in r.err
    no_secret(coordinator, r.out, r.err, opened)


def test_dashboard_without_clipboard_says_where(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str], tmp_path: Path
) -> None:
    env = dict(shared_env(lane_env, coordinator), **_fake_tools(tmp_path, clipboard=False))
    r = lane("dashboard", env=env)
    assert r.code == 0, r.err
    assert "$LANE_TOKEN" in r.err and "no clipboard tool" in r.err
    no_secret(coordinator, r.out, r.err)


def test_trace_queued_with_short_interval_waits_and_is_granted(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str]
) -> None:
    """A queued trace long-polls with waitSeconds >= 1 (docs/protocol.md#await) even when
    --interval < 1."""
    env = shared_env(lane_env, coordinator)
    with SyncLaneClient(coordinator.url, coordinator.token, "holder") as h:
        held = h.acquire(LANE, "p", "busy", "h")
        assert held.granted
        proc = subprocess.Popen(
            [str(LANE_BIN), "trace", "--lane", LANE, "--interval", "0.5", "--json"],
            env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            events.append(json.loads(line))
            queued = [e for e in events if e["event"] == "queued"]  # await answers, no heartbeats
            if len(queued) >= 2:
                break
        h.release(LANE, held.ticket_id, "completed")
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            events.append(json.loads(line))
            if events[-1]["event"] == "heartbeat" and events[-1]["state"] == "held":
                break
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    events += [json.loads(x) for x in rest.splitlines() if x.strip()]
    assert proc.returncode == 0, err
    assert "bad-request" not in err
    assert events[0]["event"] == "acquire" and events[0]["state"] == "queued"
    beats = [e for e in events if e["event"] == "heartbeat"]
    assert sum(e["event"] == "queued" for e in events) >= 2
    assert all(b["state"] == "held" for b in beats)  # no heartbeat while queued
    assert any(b["state"] == "held" and b["refreshed"] for b in beats)
    assert events[-1]["event"] == "release" and events[-1]["released"] is True


# ---------------------------------------------------------------- setup writes only what works

FILE_KEYRING = '''
import json, os
from keyring.backend import KeyringBackend

class FileKeyring(KeyringBackend):
    """A working OS-keyring stand-in: one JSON file ($LANE_TEST_KEYRING)."""
    priority = 1

    def _load(self):
        try:
            with open(os.environ["LANE_TEST_KEYRING"]) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    def get_password(self, service, username):
        return self._load().get(f"{service}|{username}")

    def set_password(self, service, username, password):
        data = self._load()
        data[f"{service}|{username}"] = password
        with open(os.environ["LANE_TEST_KEYRING"], "w") as f:
            json.dump(data, f)

    def delete_password(self, service, username):
        data = self._load()
        data.pop(f"{service}|{username}", None)
        with open(os.environ["LANE_TEST_KEYRING"], "w") as f:
            json.dump(data, f)
'''


def _with_file_keyring(env: dict[str, str], tmp: Path) -> Path:
    """Give `lane` a working keyring (a JSON file); returns the file it writes."""
    mod = tmp / "keyring-backend"
    mod.mkdir(exist_ok=True)
    (mod / "lane_file_keyring.py").write_text(FILE_KEYRING)
    store = tmp / "keyring.json"
    env.update(
        PYTHON_KEYRING_BACKEND="lane_file_keyring.FileKeyring",
        PYTHONPATH=f"{REPO}{os.pathsep}{mod}",
        LANE_TEST_KEYRING=str(store),
    )
    return store


@pytest.mark.parametrize("keyring", ["none", "working"])
@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("wrong-token", "unauthorized"),
        ("unreachable", "unreachable"),
        ("not-shared", "local-sqlite"),
    ],
)
def test_setup_writes_nothing_when_the_check_fails(
    coordinator: ThreadedCoordinator,
    lane_env: dict[str, str],
    fake: Callable[[str], AppThread],
    refused_port: int,
    tmp_path: Path,
    kind: str,
    needle: str,
    keyring: str,
) -> None:
    """Verify first, write after: a rejected token, an unreachable coordinator or one that is
    not shared leaves no token file, no keyring entry and an unchanged client.env; exit 3."""
    env = dict(lane_env)
    store = _with_file_keyring(env, tmp_path) if keyring == "working" else None
    cdir = Path(env["LANE_CONFIG_DIR"])
    cdir.mkdir(mode=0o700)
    before = "LANE_COORDINATOR_URL=http://old.example:8787\nLANE_MACHINE_ID=studio-old\n"
    (cdir / "client.env").write_text(before)
    os.chmod(cdir / "client.env", 0o600)
    url = {
        "wrong-token": coordinator.url,
        "unreachable": f"http://127.0.0.1:{refused_port}",
        "not-shared": fake("local").url,
    }[kind]
    token = "w" * 40
    r = lane("setup", url, "studio-m", "--account", "main", "--timeout", "1",
             env=env, stdin=token + "\n")  # fmt: skip
    assert sorted(p.name for p in cdir.iterdir()) == ["client.env"], r.err  # no token file
    assert (cdir / "client.env").read_text() == before, r.err
    if store is not None:
        assert not store.exists() or token not in store.read_text(), r.err
    assert r.code == 3, r.err
    assert needle in r.err and "nothing was written" in r.err, r.err
    assert token not in r.out + r.err


def test_setup_stores_a_verified_token_in_a_working_keyring(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str], tmp_path: Path
) -> None:
    env = dict(lane_env)
    store = _with_file_keyring(env, tmp_path)
    r = lane("setup", coordinator.url, "studio-m", env=env, stdin=coordinator.token + "\n")
    assert r.code == 0, r.err
    stored = json.loads(store.read_text())
    assert stored == {f"lane-coordinator|{coordinator.url}": coordinator.token}
    cdir = Path(env["LANE_CONFIG_DIR"])
    assert not (cdir / "token").exists()
    assert coordinator.token not in (cdir / "client.env").read_text()
    st = lane("status", "--lane", LANE, "--json", env=env)  # the token from the keyring alone
    assert st.code == 0 and st.json()["coordinator"] == "actor-sqlite", st.err


# ---------------------------------------------------------------- a closed stdout


def _closed_stdout_run(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """`lane ARGS` whose stdout's reader is gone before the first byte (read end closed)."""
    r, w = os.pipe()
    try:
        p = subprocess.Popen([str(LANE_BIN), *args], env=env, cwd=str(REPO), stdout=w,
                             stderr=subprocess.PIPE)  # fmt: skip
    finally:
        os.close(w)
        os.close(r)
    _, err = p.communicate(timeout=60)
    return p.returncode, err.decode()


def _quiet(err: str) -> None:
    for noise in ("BrokenPipe", "unexpected error", "Exception ignored", "Traceback"):
        assert noise not in err, err


@pytest.mark.parametrize("buffered", [True, False])
@pytest.mark.parametrize(
    "args",
    [
        ["status", "--lane", LANE, "--json"],
        ["history", "--lane", LANE],
        ["trace", "--lane", LANE, "--json", "--interval", "1"],
        ["status", "--help"],
    ],
)
def test_closed_stdout_ends_quietly(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str], args: list[str], buffered: bool
) -> None:
    """`lane ... | head -1` with the reader gone: exit 141 (128 + SIGPIPE, what a shell
    reports for a tool SIGPIPE ended), nothing on stderr about it; trace still releases."""
    env = shared_env(lane_env, coordinator)
    if buffered:
        env.pop("PYTHONUNBUFFERED", None)
    code, err = _closed_stdout_run(args, env)
    _quiet(err)
    if "--help" in args:  # argparse itself ignores a failed help write (then exit 0)
        assert code in (0, 141), err
    else:
        assert code == 141, err
    if args[0] == "trace":
        with SyncLaneClient(coordinator.url, coordinator.token, "studio-a") as c:
            assert c.status(LANE).held == []
            assert c.history(LANE).entries[0].outcome == "not-submitted"


def test_pipeline_into_head_ends_quietly(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str]
) -> None:
    """A real `lane history --json | head -1` with far more than a pipe buffer of output."""
    with SyncLaneClient(coordinator.url, coordinator.token, "studio-a", "c1") as a:
        for i in range(120):  # ~1.5 KB of JSON each: ~180 KB, past any default pipe buffer
            t = a.acquire(LANE, "p" * 100, f"scene-{i}-" + "s" * 100, "h" * 64)
            a.release(LANE, t.ticket_id, "completed", "j" * 256, "n" * 500)
    script = (
        f"set -o pipefail; '{LANE_BIN}' history --lane {LANE} --json --limit 5000 | head -1; "
        'echo "codes ${PIPESTATUS[*]}" >&2'
    )
    p = subprocess.run(["bash", "-c", script], env=shared_env(lane_env, coordinator),
                       cwd=str(REPO), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.stdout == "{\n"
    assert "codes 141 0" in p.stderr, p.stderr
    _quiet(p.stderr)


# ---------------------------------------------------------------- --help


def _parsers(parser: argparse.ArgumentParser, name: str = "lane") -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = [(name, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action._choices_actions:  # every subcommand has a one-line help
                assert sub.help, f"{name} {sub.dest}: no help"
            for sub_name, sub in action.choices.items():
                found += _parsers(sub, f"{name} {sub_name}")
    return found


def _help_blocks(text: str) -> dict[str, str]:
    """Each option's rendered block (invocation + wrapped help), by each option string."""
    blocks: dict[str, str] = {}
    keys: list[str] = []
    for line in text.splitlines():
        if line.startswith("  -"):
            invocation = line.strip().split("  ")[0]
            keys = [part.split()[0] for part in invocation.split(", ")]
            for k in keys:
                blocks[k] = line
        elif keys and line.startswith("   "):
            for k in keys:
                blocks[k] += "\n" + line
        else:
            keys = []
    return blocks


def _shown(default: Any) -> str:
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, float):
        return f"{default:g}"
    return str(default)


def test_every_option_has_help_and_shows_its_default() -> None:
    """Every option of every `lane ... --help` says what it is; one with a default shows it."""
    from client.cli import build_parser

    parsers = _parsers(build_parser())
    assert {n for n, _ in parsers} >= {"lane trace", "lane setup", "lane drill", "lane await"}
    for name, parser in parsers:
        blocks = _help_blocks(parser.format_help())
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            what = f"{name} {'/'.join(action.option_strings) or action.dest}"
            assert action.help and action.help.strip(), f"{what}: no help"
            if not action.option_strings:
                continue
            block = blocks[action.option_strings[0]]
            words = "".join(block.split())  # unwrapped, whatever the terminal width
            invocation = "".join(block.splitlines()[0].split("  ")[1].split())
            assert len(words) > len(invocation), f"{what}: no help rendered"
            d = action.default
            if d is not None and d is not argparse.SUPPRESS:
                assert f"(default:{_shown(d)})" in words, f"{what}: default {d!r} not shown"
