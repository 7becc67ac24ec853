"""The `lane` CLI as a newcomer first runs it (issue 20's list): Ctrl-C at setup's hidden
prompt and in `await`, `--json` of setup and dashboard, the help of self-test and await,
trace while queued, and one rule for empty variables."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import signal
import subprocess
import termios
import time
from pathlib import Path
from typing import Any

import pytest

from client.config import load_settings
from client.sync import SyncLaneClient
from tests.client.kit import LANE_BIN, REPO, lane, shared_env
from tests.harness import ThreadedCoordinator
from tests.harness.subproc import interruptible

LANE = "render:main"


def _read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    return seen


def _on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """`args` with a pseudo-terminal as its controlling terminal (stdin/out/err), as in a
    terminal window; returns the process and the terminal's master end."""
    master, slave = pty.openpty()

    def own_terminal() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        interruptible(args), stdin=slave, stdout=slave, stderr=slave, env=env, cwd=str(REPO),
        preexec_fn=own_terminal,
    )  # fmt: skip
    os.close(slave)
    return proc, master


# ---------------------------------------------------------------- 5. Ctrl-C


def test_ctrl_c_at_setups_hidden_prompt_stops_at_once(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str]
) -> None:
    proc, master = _on_a_terminal([str(LANE_BIN), "setup", coordinator.url, "studio-m"], lane_env)
    try:
        shown = _read_until(master, b"input hidden", 30)
        assert b"input hidden" in shown, shown
        os.write(master, b"\x03")  # Ctrl-C: the terminal sends SIGINT, no Enter follows
        code = proc.wait(timeout=10)
        rest = _read_until(master, b"interrupted", 2)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert code == 130, rest
    assert b"lane: interrupted" in rest
    assert not (Path(lane_env["LANE_CONFIG_DIR"]) / "client.env").exists()


def test_ctrl_c_in_await_releases_the_queued_ticket_and_exits_130(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str]
) -> None:
    env = shared_env(lane_env, coordinator, "studio-b")
    with SyncLaneClient(coordinator.url, coordinator.token, "holder") as holder:
        held = holder.acquire(LANE, "p", "busy", "h")
        queued = lane("acquire", "--lane", LANE, "--project", "p", "--scene", "mine",
                      "--prompt-hash", "h2", "--json", env=env).json()  # fmt: skip
        ticket = queued["ticket"]["ticketId"]
        proc = subprocess.Popen(
            interruptible([str(LANE_BIN), "await", "--lane", LANE, "--ticket", ticket]),
            env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert "queued · position 1" in first, first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, (out, err)
        assert "lane: interrupted" in err and f"released {ticket}" in err, err
        st = holder.status(LANE)
        assert [t.ticket_id for t in st.queued] == []  # released, not left to be abandoned
        entry = next(e for e in holder.history(LANE).entries if e.ticket_id == ticket)
        assert entry.outcome == "abandoned"
        holder.release(LANE, held.ticket_id, "completed")


# ---------------------------------------------------------------- 6. --json


def test_setup_json_prints_one_json_document(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str]
) -> None:
    r = lane("setup", coordinator.url, "studio-m", "--account", "main", "--json",
             env=dict(lane_env), stdin=coordinator.token + "\n")  # fmt: skip
    assert r.code == 0, r.err
    body = r.json()
    assert body["coordinator"] == "actor-sqlite" and body["machineId"] == "studio-m"
    assert body["url"] == coordinator.url and body["required"] is True
    assert body["settingsFile"].endswith("client.env") and body["account"] == "main"
    assert coordinator.token not in r.out + r.err


def test_dashboard_json_prints_one_json_document(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str], tmp_path: Path
) -> None:
    browser = tmp_path / "fake-browser"
    browser.write_text("#!/bin/sh\nexit 0\n")
    browser.chmod(0o755)
    env = dict(shared_env(lane_env, coordinator), PATH="/usr/bin:/bin", BROWSER=f"{browser} %s")
    r = lane("dashboard", "--json", env=env)
    assert r.code == 0, r.err
    body = r.json()
    assert body["url"] == f"{coordinator.url}/control-room"
    assert body["clipboard"] is None and body["tokenFrom"] == "$LANE_TOKEN"
    assert coordinator.token not in r.out + r.err


# ---------------------------------------------------------------- 9. help


def _help_of(command: str, option: str) -> str:
    from client.cli import build_parser

    sub = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices[command]
    text = " ".join(sub.format_help().split())
    start = text.index(f" {option} ")
    nxt = [text.find(" --", start + len(option) + 2)]
    return text[start : max(nxt)] if max(nxt) > 0 else text[start:]


def test_self_test_help_names_its_own_account_default() -> None:
    account = _help_of("self-test", "--account")
    assert "LANE_SELF_TEST_ACCOUNT" in account and "self-test" in account, account
    assert "default: LANE_ACCOUNT" not in account
    assert "(default: self-test)" in _help_of("self-test", "--route")


def test_await_help_shows_the_max_wait_default() -> None:
    assert "(default: no limit" in _help_of("await", "--max-wait")


# ---------------------------------------------------------------- 10. trace while queued


def test_trace_while_queued_waits_with_await_not_heartbeats(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str]
) -> None:
    env = shared_env(lane_env, coordinator)
    with SyncLaneClient(coordinator.url, coordinator.token, "holder") as h:
        held = h.acquire(LANE, "p", "busy", "h")
        proc = subprocess.Popen(
            interruptible([str(LANE_BIN), "trace", "--lane", LANE, "--interval", "0.5",
                           "--json"]),
            env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        events: list[dict[str, Any]] = [json.loads(proc.stdout.readline())]
        assert events[0]["event"] == "acquire" and events[0]["state"] == "queued"
        time.sleep(2.5)  # several intervals while queued
        h.release(LANE, held.ticket_id, "completed")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            events.append(json.loads(proc.stdout.readline()))
            if events[-1]["event"] == "heartbeat":
                break
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    events += [json.loads(x) for x in rest.splitlines() if x.strip()]
    assert proc.returncode == 0, err
    beats = [e for e in events if e["event"] == "heartbeat"]
    assert beats and all(b["refreshed"] and b["state"] == "held" for b in beats), beats
    waits = [e for e in events if e["event"] == "queued"]
    assert waits and waits[0]["position"] == 1, events
    assert any(e["event"] == "granted" for e in events), events
    assert events[-1]["event"] == "release" and events[-1]["released"] is True


# ---------------------------------------------------------------- 11. empty means unset

FILE_VALUES = {
    "LANE_COORDINATOR_URL": "http://127.0.0.1:9",
    "LANE_MACHINE_ID": "from-file",
    "LANE_ACCOUNT": "file-account",
    "LANE_REQUIRED": "1",
    "LANE_TIMEOUT_SECONDS": "7",
    "LANE_LOCAL_CAPACITY": "3",
    "LANE_HUMAN_CHECK_COOLDOWN_SECONDS": "60",
    "LANE_SELF_TEST_ACCOUNT": "file-self-test",
}
READ = {
    "LANE_COORDINATOR_URL": "url",
    "LANE_MACHINE_ID": "machine_id",
    "LANE_ACCOUNT": "account",
    "LANE_REQUIRED": "required",
    "LANE_TIMEOUT_SECONDS": "timeout",
    "LANE_LOCAL_CAPACITY": "local_capacity",
    "LANE_HUMAN_CHECK_COOLDOWN_SECONDS": "human_check_cooldown_seconds",
    "LANE_SELF_TEST_ACCOUNT": "self_test_account",
}


@pytest.mark.parametrize("variable", sorted(FILE_VALUES))
def test_an_empty_variable_counts_as_unset(tmp_path: Path, variable: str) -> None:
    """`VAR=` in the environment is as if VAR were unset: client.env's value applies (one
    rule for every variable; docs/client.md#configuration)."""
    cdir = tmp_path / "config"
    cdir.mkdir()
    env_file = cdir / "client.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in FILE_VALUES.items()))
    env_file.chmod(0o600)
    from_file = load_settings(environ={"LANE_CONFIG_DIR": str(cdir)}, mint_claim=False,
                              use_keyring=False)  # fmt: skip
    emptied = load_settings(environ={"LANE_CONFIG_DIR": str(cdir), variable: ""},
                            mint_claim=False, use_keyring=False)  # fmt: skip
    attr = READ[variable]
    assert getattr(emptied, attr) == getattr(from_file, attr), (variable, attr)
