"""docs/protocol.md#durability and docs/protocol.md#server-config acceptance: the real
`lane-coordinator` process, killed with SIGKILL and restarted on the same data dir (every
acknowledged row; in-flight holds, docs/protocol.md#in-flight, with their holdUntil); and the
`check` / `serve` refusals an operator sees.

The subprocess harness is tests/harness/subproc.py (port 0, output read by a thread).
"""

from __future__ import annotations

import hashlib
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from tests.harness import CoordinatorProcess, cli, write_token_file

TOKEN = "acceptance-token-0123456789-abcdefghijklmnopqrstu"  # 49 bytes
SOLO, DUO, BRIEF = "solo:main", "duo:main", "brief:main"
BRIEF_HOLD = 20.0  # route brief's in_flight_hold_seconds: a hold that ends while the server is down
CONFIG = (
    "[routes.solo]\ncapacity = 1\n[routes.duo]\ncapacity = 2\n"
    f"[routes.brief]\ncapacity = 1\nin_flight_hold_seconds = {BRIEF_HOLD:g}\n"
)
SHORT_LEASE = 15.0  # the protocol's minimum


@pytest.fixture
def setup_dir(tmp_path: Path) -> tuple[Path, Path, Path]:
    data = tmp_path / "data"
    config = tmp_path / "coordinator.toml"
    config.write_text(CONFIG, encoding="utf-8")
    token_file = tmp_path / "token"
    write_token_file(token_file, TOKEN)
    token_file.chmod(0o600)
    return data, config, token_file


@pytest.fixture
def servers() -> Iterator[Callable[..., CoordinatorProcess]]:
    """Start servers; every one is killed at teardown, whatever happened."""
    started: list[CoordinatorProcess] = []

    def start(data: Path, token_file: Path, config: Path) -> CoordinatorProcess:
        srv = CoordinatorProcess(data, token_file, config)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        if srv.proc.poll() is None:
            srv.proc.kill()
        srv.stop()


def _op(
    srv: CoordinatorProcess, name: str, body: dict[str, Any], status: int = 200
) -> dict[str, Any]:
    got_status, reply = srv.request(
        "POST", f"/v1/lanes/{name}", TOKEN, {"protocolVersion": 1, **body}
    )
    assert got_status == status, (name, got_status, reply)
    assert isinstance(reply, dict)
    return reply


def _acquire(
    srv: CoordinatorProcess, lane: str, machine: str, prompt: str, **kw: Any
) -> dict[str, Any]:
    body = {
        "lane": lane,
        "machineId": machine,
        "claimId": f"c-{machine}",
        "project": f"p-{prompt}",
        "scene": "s",
        "promptHash": prompt,
        **kw,
    }
    ticket: dict[str, Any] = _op(srv, "acquire", body)["ticket"]
    return ticket


def _call(t: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {
        "lane": t["lane"],
        "machineId": t["machineId"],
        "claimId": t["claimId"],
        "ticketId": t["ticketId"],
        **kw,
    }


def _receipt(
    t: dict[str, Any], phase: str, payload: dict[str, Any], bad_hash: bool = False
) -> dict[str, Any]:
    canonical = rfc8785.dumps(payload) + (b" " if bad_hash else b"")
    h = "sha256:" + hashlib.sha256(canonical).hexdigest()
    return _call(
        t,
        receiptId=f"{t['ticketId']}:{phase}:{h[7:23]}",
        phase=phase,
        payload=payload,
        contentHash=h,
    )


def _kill9(srv: CoordinatorProcess) -> None:
    assert srv.kill9() == -signal.SIGKILL


def test_kill_9_and_restart_keeps_every_acknowledged_row(
    setup_dir: tuple[Path, Path, Path], servers: Callable[..., CoordinatorProcess]
) -> None:
    data, config, token_file = setup_dir
    s1 = servers(data, token_file, config)

    # solo (capacity 1): a short lease that will run out while the server is down, two waiters
    t1 = _acquire(s1, SOLO, "mA", "one", leaseSeconds=SHORT_LEASE)
    t2 = _acquire(s1, SOLO, "mB", "two", leaseSeconds=SHORT_LEASE)
    t6 = _acquire(s1, SOLO, "mC", "six")
    assert (t1["state"], t2["state"], t6["state"]) == ("held", "queued", "queued")
    r1 = _op(s1, "receipt", _receipt(t1, "lease-acquired", {"refs": 2}), 201)
    assert r1["contentHashVerified"] is True

    # duo (capacity 2): heartbeat, receipts (one flagged), a render-log row, a pause, a waiter
    t3 = _acquire(s1, DUO, "mA", "three", leaseSeconds=3600)
    t4 = _acquire(s1, DUO, "mD", "four")
    hb = _op(s1, "heartbeat", _call(t3, leaseSeconds=3000))
    assert hb["refreshed"] is True
    _op(s1, "receipt", _receipt(t3, "references-applied", {"n": 1}), 201)
    bad = _op(s1, "receipt", _receipt(t3, "provider-submitted", {"job": "x"}, bad_hash=True), 201)
    assert bad["contentHashVerified"] is False
    rel = _op(s1, "release", _call(t4, outcome="completed", providerJobId="job-4", note="ok"))
    assert rel["released"] is True
    cd = _op(s1, "cooldown", _call(t3, reasonCode="provider-human-check", retryAfterSeconds=7200))
    t5 = _acquire(s1, DUO, "mE", "five")
    assert t5["state"] == "queued"

    before: dict[str, Any] = {
        lane: _op(s1, "status", {"lane": lane, "includeReceipts": True}) for lane in (SOLO, DUO)
    }
    hist_before = {lane: _op(s1, "history", {"lane": lane}) for lane in (SOLO, DUO)}
    _, inc_before = s1.request("GET", "/v1/incidents", TOKEN)
    _kill9(s1)  # right after the last acknowledged reply

    # stay down until t1's lease has run out
    time.sleep(max(0.0, t1["leaseExpiresAt"] - time.time()) + 1.0)
    s2 = servers(data, token_file, config)
    started_at = time.time()

    # solo: t1 reaped at its original expiry, its waiter promoted on restart
    hist = _op(s2, "history", {"lane": SOLO})
    [row1] = [e for e in hist["entries"] if e["ticketId"] == t1["ticketId"]]
    assert row1["outcome"] == "expired"
    assert row1["endedAt"] == t1["leaseExpiresAt"]
    st = _op(s2, "status", {"lane": SOLO, "includeReceipts": True})
    assert [t["ticketId"] for t in st["held"]] == [t2["ticketId"]]
    held2 = st["held"][0]
    assert held2["fence"] == t1["fence"] + 1
    assert t1["leaseExpiresAt"] < held2["heldAt"] <= started_at + 1
    assert [t["ticketId"] for t in st["queued"]] == [t6["ticketId"]]
    assert st["recentReceipts"] == before[SOLO]["recentReceipts"]

    # duo: held ticket, lease, fence, pause, receipts, waiter and render log all as acknowledged
    st = _op(s2, "status", {"lane": DUO, "includeReceipts": True})
    assert st["held"] == before[DUO]["held"]
    assert st["held"][0]["leaseExpiresAt"] == hb["leaseExpiresAt"]
    assert st["pause"] == cd["pause"] == before[DUO]["pause"]
    assert [t["ticketId"] for t in st["queued"]] == [t5["ticketId"]]
    assert st["recentReceipts"] == before[DUO]["recentReceipts"]
    assert {r["contentHashVerified"] for r in st["recentReceipts"]} == {True, False}
    assert _op(s2, "history", {"lane": DUO}) == hist_before[DUO]
    old_solo = {e["ticketId"]: e for e in hist_before[SOLO]["entries"]}
    assert all(e == old_solo[e["ticketId"]] for e in hist["entries"] if e["ticketId"] in old_solo)
    _, inc_after = s2.request("GET", "/v1/incidents", TOKEN)
    after_ids = {(i["lane"], i["id"]) for i in inc_after["incidents"]}
    assert {(i["lane"], i["id"]) for i in inc_before["incidents"]} <= after_ids
    assert any(
        i["kind"] == "lease-expired" and i["ticketId"] == t1["ticketId"]
        for i in inc_after["incidents"]
    )
    # a replayed receipt is still a replay; a changed one is still a conflict
    original = _receipt(t1, "lease-acquired", {"refs": 2})
    again = _op(s2, "receipt", original, 200)
    assert again["replay"] is True
    changed = _receipt(t1, "lease-acquired", {"refs": 3})
    changed["receiptId"] = original["receiptId"]
    assert _op(s2, "receipt", changed, 409)["error"]["code"] == "receipt-conflict"

    # the alarm is re-armed: t2's short lease runs out and t6 is promoted with no other call
    # than t6's own long poll (which only answers early when something changed)
    t6_call = _call(t6, waitSeconds=60)
    poll_start = time.time()
    got: dict[str, Any] = {}
    while time.time() - poll_start < 60 and not got.get("granted"):
        got = _op(s2, "await", t6_call)
    assert got["granted"] is True and got["ticket"]["ticketId"] == t6["ticketId"]
    assert got["ticket"]["heldAt"] == pytest.approx(held2["heldAt"] + SHORT_LEASE, abs=2.0)
    hist = _op(s2, "history", {"lane": SOLO})
    [row2] = [e for e in hist["entries"] if e["ticketId"] == t2["ticketId"]]
    assert row2["outcome"] == "expired" and row2["endedAt"] == held2["leaseExpiresAt"]
    assert got["ticket"]["fence"] == held2["fence"] + 1


def _incidents(srv: CoordinatorProcess, lane: str) -> list[dict[str, Any]]:
    status, body = srv.request("GET", f"/v1/incidents?lane={lane}", TOKEN)
    assert status == 200, body
    rows: list[dict[str, Any]] = body["incidents"]
    return rows


def test_in_flight_holds_survive_kill_9_and_a_hold_that_ran_out_meanwhile_ends_at_restart(
    setup_dir: tuple[Path, Path, Path], servers: Callable[..., CoordinatorProcess]
) -> None:
    """Two expired tickets with a provider-submitted receipt (and no provider-terminal) each
    keep their slot: on solo (hold 1800 s) and brief (hold 20 s), a waiter behind each. kill -9
    once both holds are made; the server stays down past brief's holdUntil. At restart solo's
    hold is there with its exact holdUntil (its waiter still queued); brief's is ended by the
    alarm as `expired` at its holdUntil and its waiter promoted."""
    data, config, token_file = setup_dir
    s1 = servers(data, token_file, config)
    jobs: dict[str, dict[str, Any]] = {}
    waiters: dict[str, dict[str, Any]] = {}
    for lane in (SOLO, BRIEF):
        jobs[lane] = _acquire(s1, lane, "mA", f"job-{lane}", leaseSeconds=SHORT_LEASE)
        waiters[lane] = _acquire(s1, lane, "mB", f"wait-{lane}")
        assert (jobs[lane]["state"], waiters[lane]["state"]) == ("held", "queued")
        _op(s1, "receipt", _receipt(jobs[lane], "provider-submitted", {"job": lane}), 201)
    expiry = max(j["leaseExpiresAt"] for j in jobs.values())
    time.sleep(max(0.0, expiry - time.time()) + 0.5)  # the alarm reaps both leases
    before = {lane: _op(s1, "status", {"lane": lane}) for lane in (SOLO, BRIEF)}
    for lane, st in before.items():
        assert st["held"] == [] and [t["ticketId"] for t in st["queued"]] == [
            waiters[lane]["ticketId"]
        ], st  # nobody promoted: the job keeps the slot
        [hold] = st["inFlight"]
        assert (hold["ticketId"], hold["since"]) == (
            jobs[lane]["ticketId"], jobs[lane]["leaseExpiresAt"],
        )  # fmt: skip
    brief_until = before[BRIEF]["inFlight"][0]["holdUntil"]
    solo_hold = before[SOLO]["inFlight"][0]
    assert brief_until == before[BRIEF]["inFlight"][0]["submittedAt"] + BRIEF_HOLD
    assert solo_hold["holdUntil"] == solo_hold["submittedAt"] + 1800
    _kill9(s1)
    assert time.time() < brief_until, "too slow: brief's hold ran out before the kill; rerun"

    time.sleep(max(0.0, brief_until - time.time()) + 1.0)  # down past brief's holdUntil
    restarted = time.time()
    s2 = servers(data, token_file, config)
    deadline = time.monotonic() + 30  # the alarm at restart ends brief's hold (a read: no op)
    while not any(i["kind"] == "in-flight-expired" for i in _incidents(s2, BRIEF)):
        assert time.monotonic() < deadline, _incidents(s2, BRIEF)
        time.sleep(0.1)
    [ended] = [i for i in _incidents(s2, BRIEF) if i["kind"] == "in-flight-expired"]
    assert ended["ticketId"] == jobs[BRIEF]["ticketId"] and ended["at"] == brief_until
    st = _op(s2, "status", {"lane": BRIEF})
    assert st["inFlight"] == [] and [t["ticketId"] for t in st["held"]] == [
        waiters[BRIEF]["ticketId"]
    ]
    granted = st["held"][0]
    assert granted["fence"] == jobs[BRIEF]["fence"] + 1
    assert brief_until < restarted <= granted["heldAt"]  # promoted at restart, not before
    [row] = [e for e in _op(s2, "history", {"lane": BRIEF})["entries"]
             if e["ticketId"] == jobs[BRIEF]["ticketId"]]  # fmt: skip
    assert (row["outcome"], row["inFlightUntil"], row["inFlightEnded"]) == (
        "expired", brief_until, "expired",
    )  # fmt: skip

    # solo: the hold as it was acknowledged, holdUntil to the microsecond; nobody promoted
    st = _op(s2, "status", {"lane": SOLO})
    assert st["inFlight"] == before[SOLO]["inFlight"] and st["held"] == []
    assert [t["ticketId"] for t in st["queued"]] == [waiters[SOLO]["ticketId"]]
    [row] = [e for e in _op(s2, "history", {"lane": SOLO})["entries"]
             if e["ticketId"] == jobs[SOLO]["ticketId"]]  # fmt: skip
    assert (row["inFlightUntil"], row["inFlightEnded"]) == (solo_hold["holdUntil"], None)
    # and it still works: the provider-terminal receipt ends it and promotes the waiter
    _op(s2, "receipt", _receipt(jobs[SOLO], "provider-terminal", {"job": SOLO}), 201)
    st = _op(s2, "status", {"lane": SOLO})
    assert st["inFlight"] == [] and [t["ticketId"] for t in st["held"]] == [
        waiters[SOLO]["ticketId"]
    ]


def test_clean_restart_and_check_on_a_used_data_dir(
    setup_dir: tuple[Path, Path, Path], servers: Callable[..., CoordinatorProcess]
) -> None:
    data, config, token_file = setup_dir
    s1 = servers(data, token_file, config)
    t = _acquire(s1, DUO, "mA", "x")
    assert s1.stop() == 0  # SIGTERM: a graceful stop
    files = {p.name: p.read_bytes() for p in data.iterdir() if p.suffix == ".sqlite"}
    assert set(files) == {"duo+main.sqlite"}
    env = {"LANE_COORDINATOR_TOKEN": TOKEN}
    r = cli("check", "--data-dir", str(data), "--config", str(config), env=env)
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout
    # the dry run works on a scratch copy: the lane file is untouched
    assert {p.name: p.read_bytes() for p in data.iterdir() if p.suffix == ".sqlite"} == files
    s2 = servers(data, token_file, config)
    st = _op(s2, "status", {"lane": DUO})
    assert [h["ticketId"] for h in st["held"]] == [t["ticketId"]]


# ---------------------------------------------------------------- check / serve refusals


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text and 'File "' not in text, text


def test_check_passes_on_a_good_setup(setup_dir: tuple[Path, Path, Path]) -> None:
    data, config, token_file = setup_dir
    for env, extra in (
        ({"LANE_COORDINATOR_TOKEN": TOKEN}, []),
        ({}, ["--token-file", str(token_file)]),
    ):
        r = cli("check", "--data-dir", str(data), "--config", str(config), *extra, env=env)
        assert r.returncode == 0, r.stderr
        assert "ok" in r.stdout and TOKEN not in r.stdout + r.stderr
        _no_traceback(r.stdout + r.stderr)
    assert not data.exists() or not any(data.iterdir())  # starts nothing, writes nothing


@pytest.mark.parametrize(
    ("token", "needle"),
    [("short-token", "32"), ("x" * 31, "32"), ("", "token")],
)
def test_check_refuses_a_short_or_missing_token(
    setup_dir: tuple[Path, Path, Path], token: str, needle: str
) -> None:
    data, config, _ = setup_dir
    r = cli(
        "check",
        "--data-dir",
        str(data),
        "--config",
        str(config),
        env={"LANE_COORDINATOR_TOKEN": token},
    )
    assert r.returncode != 0
    assert needle in r.stderr and "token" in r.stderr
    assert "secrets.token_urlsafe" in r.stderr  # says how to make one
    if token:
        assert token not in r.stderr
    _no_traceback(r.stdout + r.stderr)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[routes.solo]\ncapacity = 0\n", "capacity"),
        ('[routes.solo]\ncapacity = "one"\n', "capacity"),
        ("default_lease_seconds = 5\n", "default_lease_seconds"),
        ("[routes.solo\ncapacity = 1\n", "TOML"),
        ("surprise = 1\n", "surprise"),
        ('[lanes."not a lane"]\ncapacity = 1\n', "lane"),
        ("[routes.Solo]\ncapacity = 1\n", "Solo"),
    ],
)
def test_check_refuses_a_bad_config_with_a_clear_message(
    setup_dir: tuple[Path, Path, Path], text: str, needle: str
) -> None:
    data, config, _ = setup_dir
    config.write_text(text, encoding="utf-8")
    r = cli(
        "check",
        "--data-dir",
        str(data),
        "--config",
        str(config),
        env={"LANE_COORDINATOR_TOKEN": TOKEN},
    )
    assert r.returncode != 0
    assert needle in r.stderr and "config" in r.stderr, r.stderr
    _no_traceback(r.stdout + r.stderr)


def test_check_refuses_a_missing_config_file(setup_dir: tuple[Path, Path, Path]) -> None:
    data, config, _ = setup_dir
    r = cli(
        "check",
        "--data-dir",
        str(data),
        "--config",
        str(config) + ".missing",
        env={"LANE_COORDINATOR_TOKEN": TOKEN},
    )
    assert r.returncode != 0 and "config" in r.stderr
    _no_traceback(r.stdout + r.stderr)


@pytest.mark.parametrize("token", [None, "too-short"])
def test_serve_without_a_usable_token_refuses_to_start(
    setup_dir: tuple[Path, Path, Path], token: str | None
) -> None:
    data, config, _ = setup_dir
    env = {} if token is None else {"LANE_COORDINATOR_TOKEN": token}
    started = time.monotonic()
    r = cli("serve", "--port", "0", "--data-dir", str(data), "--config", str(config), env=env)
    assert time.monotonic() - started < 60  # it exits; it does not serve
    assert r.returncode != 0
    assert "token" in r.stderr and "secrets.token_urlsafe" in r.stderr, r.stderr
    assert "LANE_COORDINATOR_TOKEN" in r.stderr and "--token-file" in r.stderr
    _no_traceback(r.stdout + r.stderr)
    assert not data.exists() or not any(data.iterdir())


def test_a_second_server_on_the_same_data_dir_is_refused(
    setup_dir: tuple[Path, Path, Path],
) -> None:
    """Two servers on one data dir would each grant the same slot: the second one exits."""
    data, config, token_file = setup_dir
    first = CoordinatorProcess(data, token_file, config)
    try:
        r = cli(
            "serve", "--port", "0", "--data-dir", str(data), "--config", str(config),
            "--token-file", str(token_file),
        )  # fmt: skip
        assert r.returncode != 0
        assert "in use by another lane-coordinator" in r.stderr, r.stderr
        _no_traceback(r.stdout + r.stderr)
        status, body = first.request("POST", "/v1/lanes/status", TOKEN, {
            "protocolVersion": 1, "lane": "solo:main"})  # fmt: skip
        assert status == 200 and body["coordinator"] == "actor-sqlite"
    finally:
        first.stop()
    # The lock goes with its process: a new server starts on the same dir at once.
    second = CoordinatorProcess(data, token_file, config)
    assert second.stop() == 0


def test_a_killed_server_leaves_no_stale_lock(setup_dir: tuple[Path, Path, Path]) -> None:
    data, config, token_file = setup_dir
    first = CoordinatorProcess(data, token_file, config)
    first.proc.kill()
    first.proc.wait(timeout=30)
    again = CoordinatorProcess(data, token_file, config)
    assert again.stop() == 0
