"""LocalQueue: the coordinator's LaneCore in-process against SQLite files in the state dir."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client.config import connect, load_settings
from client.errors import NotFoundError, NotOwnerError, SyncedFolderError, TicketNotHeldError
from client.local import LocalQueue
from client.local_fs import mount_fstype, synced_folder_reason
from tests.client.kit import REPO, lane
from tests.harness import FakeClock

LANE = "render:local"
WORKER = Path(__file__).with_name("race_worker.py")


def q(tmp: Path, machine: str = "m1", claim: str | None = "c1", **kw: object) -> LocalQueue:
    return LocalQueue(tmp / "state", machine, claim, **kw)  # type: ignore[arg-type]


async def test_local_lane_operations(tmp_path: Path) -> None:
    a, b = q(tmp_path), q(tmp_path, "m2", "c2")
    try:
        # Reads and ticket calls on a lane nobody acquired on create no file (as the server).
        empty = await a.status(LANE)
        assert empty.held == [] and empty.queued == [] and empty.capacity == 1
        assert (await a.history(LANE)).entries == []
        with pytest.raises(NotFoundError) as nf:
            await a.heartbeat(LANE, "t_x")
        assert nf.value.status == 404 and "t_x" in nf.value.message
        assert not (tmp_path / "state" / "render+local.sqlite").exists()
        ra = await a.acquire(LANE, "p", "1", "h")
        assert ra.coordinator == "local-sqlite" and ra.granted and ra.ticket.fence == 1
        rb = await b.acquire(LANE, "p", "2", "h")
        assert rb.state == "queued" and rb.ticket.position == 1 and not rb.granted
        dup = await b.acquire(LANE, "p", "1", "h")
        assert dup.duplicate and dup.ticket_id == ra.ticket_id and not dup.granted
        assert (await a.heartbeat(LANE, ra.ticket_id)).refreshed
        assert (await b.heartbeat(LANE, rb.ticket_id)).reason == "not-held"
        with pytest.raises(NotOwnerError):
            await b.await_ticket(LANE, ra.ticket_id, 1)
        with pytest.raises(NotFoundError):
            await a.release(LANE, "t_unknown")
        rec = await a.receipt(LANE, ra.ticket_id, "lease-acquired", {"k": 1})
        assert not rec.stored and not rec.replay and rec.content_hash_verified is None
        assert rec.receipt_id.startswith(f"{ra.ticket_id}:lease-acquired:")
        st = await a.status(LANE, include_receipts=True)
        wire = st.to_wire()
        assert "recentReceipts" not in wire and "unreadableReceipts" not in wire
        assert st.coordinator == "local-sqlite" and st.capacity == 1
        rel = await a.release(LANE, ra.ticket_id, "completed", "job", "note")
        assert rel.released and rel.promoted == [rb.ticket_id]
        got = await b.await_ticket(LANE, rb.ticket_id, 1)
        assert got.granted and got.state == "held"
        with pytest.raises(TicketNotHeldError):
            await a.cooldown(LANE, ra.ticket_id, 60)
        h = await a.history(LANE)
        assert [e.ticket_id for e in h.entries] == [ra.ticket_id]
        assert h.counts == {"completed": 1} and h.entries[0].provider_job_id == "job"
        assert (tmp_path / "state" / "render+local.sqlite").is_file()
    finally:
        await a.close()
        await b.close()


async def test_local_await_polls_across_instances(tmp_path: Path) -> None:
    a, b = q(tmp_path), q(tmp_path, "m2", "c2", poll_interval=0.1)
    try:
        ra = await a.acquire(LANE, "p", "1", "h")
        rb = await b.acquire(LANE, "p", "2", "h")
        waiter = asyncio.create_task(b.await_ticket(LANE, rb.ticket_id, 30))
        await asyncio.sleep(0.3)
        assert not waiter.done()
        started = time.monotonic()
        await a.release(LANE, ra.ticket_id, "completed")
        got = await asyncio.wait_for(waiter, 30)
        assert got.granted and time.monotonic() - started < 20
    finally:
        await a.close()
        await b.close()


async def test_local_lease_expiry_and_waiter_abandon(tmp_path: Path) -> None:
    clock = FakeClock()
    a = q(tmp_path, clock=clock)
    b = q(tmp_path, "m2", "c2", clock=clock)
    try:
        ra = await a.acquire(LANE, "p", "1", "h", lease_seconds=15)
        rb = await b.acquire(LANE, "p", "2", "h", lease_seconds=3600)
        rc = await b.acquire(LANE, "p", "3", "h")
        clock.now += 16  # the lease ran out: the next call of anyone reaps and promotes
        st = await a.status(LANE)
        assert [t.ticket_id for t in st.held] == [rb.ticket_id]
        assert (await a.heartbeat(LANE, ra.ticket_id)).reason == "expired"
        # rc's owner keeps it alive (written to the file); then it stops calling.
        clock.now += 300
        assert (await b.heartbeat(LANE, rc.ticket_id)).reason == "not-held"
        clock.now += 500  # 816 s after enqueue, 500 s after its last keep-alive: alive
        assert [t.ticket_id for t in (await a.status(LANE)).queued] == [rc.ticket_id]
        clock.now += 101  # 601 s after the keep-alive: abandoned by the next call
        assert (await a.status(LANE)).queued == []
        hist = {e.ticket_id: e.outcome for e in (await a.history(LANE)).entries}
        assert hist == {ra.ticket_id: "expired", rc.ticket_id: "abandoned"}
    finally:
        await a.close()
        await b.close()


async def test_local_lane_clock_never_runs_back(tmp_path: Path) -> None:
    clock = FakeClock()
    t0 = clock.now
    a = q(tmp_path, clock=clock)
    b = q(tmp_path, "m2", "c2", clock=clock)
    try:
        await a.acquire(LANE, "p", "1", "h")
        clock.now = t0 - 100  # this computer's clock stepped back
        assert (await a.status(LANE)).now == t0
        second = await a.acquire(LANE, "p", "2", "h")
        assert second.ticket.enqueued_at == t0
        # Another process, with no core of its own yet, reads the lane's last `now`.
        assert (await b.status(LANE)).now == t0
        clock.now = t0 + 5
        assert (await b.status(LANE)).now == t0 + 5
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("reuse", [True, False], ids=["kept-core", "reloaded-core"])
async def test_local_unwritten_keepalive_is_not_kept(tmp_path: Path, reuse: bool) -> None:
    """A keep-alive the keep-alive rule does not write (less than KEEPALIVE_PERSIST_SECONDS
    after the written one) does not keep a waiter alive, whether the queue keeps its core
    between calls or rebuilds it from the file."""
    clock = FakeClock()
    a = q(tmp_path, clock=clock)
    a.reuse_core = reuse
    try:
        await a.acquire(LANE, "p", "1", "h", lease_seconds=3600)
        waiter = await a.acquire(LANE, "p", "2", "h")
        clock.now += 5
        assert (await a.heartbeat(LANE, waiter.ticket_id)).reason == "not-held"
        clock.now += 596  # 601 s after the written keep-alive (the enqueue)
        assert (await a.status(LANE)).queued == []
        hist = {e.ticket_id: e.outcome for e in (await a.history(LANE)).entries}
        assert hist == {waiter.ticket_id: "abandoned"}
    finally:
        await a.close()


async def test_local_cooldown_pauses_promotion(tmp_path: Path) -> None:
    clock = FakeClock()
    a, b = q(tmp_path, clock=clock), q(tmp_path, "m2", "c2", clock=clock)
    try:
        ra = await a.acquire(LANE, "p", "1", "h")
        rb = await b.acquire(LANE, "p", "2", "h")
        cd = await a.cooldown(LANE, ra.ticket_id, 120)
        assert cd.paused and cd.pause is not None and cd.pause.machine_id == "m1"
        await a.release(LANE, ra.ticket_id, "not-submitted")
        w = await b.await_ticket(LANE, rb.ticket_id, 1)
        assert w.state == "queued" and w.pause is not None
        clock.now += 121
        w = await b.await_ticket(LANE, rb.ticket_id, 1)
        assert w.granted and w.pause is None
    finally:
        await a.close()
        await b.close()


async def test_local_queue_reports_the_eta_error_like_the_server(tmp_path: Path) -> None:
    """The local queue runs the server's lane core: its status carries etaError over its
    grants (docs/protocol.md#eta-error), its render log the first ETA and the wait, and
    another instance on the same file reads the same window."""
    clock = FakeClock()
    a, b = q(tmp_path, clock=clock), q(tmp_path, "m2", "c2", clock=clock)
    try:
        assert (await a.status(LANE)).eta_error is None
        ra = await a.acquire(LANE, "p", "1", "h")
        rb = await b.acquire(LANE, "p", "2", "h")
        first = rb.ticket.eta_seconds
        assert first is not None and first > 0  # the default hold: queued behind ra
        clock.now += 40
        await a.release(LANE, ra.ticket_id, "completed")
        st = await b.status(LANE)
        assert st.eta_error is not None
        errors = sorted([0.0, round(abs(first - 40.0), 3)])
        assert st.eta_error.to_wire() == {
            "grants": 2,
            "medianSeconds": errors[0],
            "p90Seconds": errors[1],
        }
        [row] = (await a.history(LANE)).entries
        assert (row.eta_first_seconds, row.wait_seconds) == (0.0, 0.0)
        again = q(tmp_path, "m3", "c3", clock=clock)
        try:
            assert (await again.status(LANE)).eta_error == st.eta_error
        finally:
            await again.close()
    finally:
        await a.close()
        await b.close()


async def test_local_capacity_setting(tmp_path: Path) -> None:
    env = {
        "LANE_STATE_DIR": str(tmp_path / "state"),
        "LANE_CONFIG_DIR": str(tmp_path),
        "LANE_LOCAL_CAPACITY": "2",
        "LANE_MACHINE_ID": "m1",
    }
    backend = connect(load_settings(environ=env, use_keyring=False))
    try:
        replies = [await backend.acquire(LANE, "p", str(i), "h") for i in range(3)]
        assert [r.granted for r in replies] == [True, True, False]
        assert (await backend.status(LANE)).capacity == 2
    finally:
        await backend.close()


def test_eight_processes_never_overlap(tmp_path: Path) -> None:
    """8 driver processes race on one capacity-1 local lane: never two holders at once."""
    state, logs, go = tmp_path / "state", tmp_path / "logs", tmp_path / "go"
    logs.mkdir()
    rounds = 3
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(state), str(i), str(logs), str(go), str(rounds)],
            cwd=str(REPO),
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    time.sleep(0.5)
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    records = [
        json.loads(line) for f in sorted(logs.iterdir()) for line in f.read_text().splitlines()
    ]
    assert len(records) == 8 * rounds
    records.sort(key=lambda r: r["enter"])
    for prev, cur in itertools.pairwise(records):
        assert cur["enter"] > prev["exit"], "two holders at once"
    assert all(r["held"] == [r["ticket"]] for r in records)
    assert sorted(r["fence"] for r in records) == list(range(1, 8 * rounds + 1))

    async def history() -> tuple[set[str], dict[str, int]]:
        reader = LocalQueue(state, "reader")
        try:
            h = await reader.history(LANE, limit=1000)
            st = await reader.status(LANE)
            assert st.held == [] and st.queued == []
            return {e.ticket_id for e in h.entries}, h.counts
        finally:
            await reader.close()

    ids, counts = asyncio.run(history())
    assert ids == {r["ticket"] for r in records}
    assert counts == {"completed": 8 * rounds}


# ---------------------------------------------------------------- synced folders


@pytest.mark.parametrize(
    ("rel", "name"),
    [
        ("Dropbox/lane", "Dropbox"),
        ("Dropbox (Team)/x", "Dropbox"),
        ("Library/Mobile Documents/com~apple~CloudDocs/lane", "iCloud Drive"),
        ("Library/CloudStorage/GoogleDrive-me@x.com/My Drive/lane", "CloudStorage"),
        ("OneDrive - Contoso/state", "OneDrive"),
        ("Google Drive/state", "Google Drive"),
    ],
)
def test_synced_folders_refused(tmp_path: Path, rel: str, name: str) -> None:
    path = tmp_path / rel
    reason = synced_folder_reason(path, mounts_text="")
    assert reason is not None and name in reason
    with pytest.raises(SyncedFolderError) as ei:
        LocalQueue(path, "m1", mounts_text="")
    assert "SQLite WAL is not a cross-machine protocol" in ei.value.message
    assert not path.exists()


def test_network_mounts_refused(tmp_path: Path) -> None:
    mounts = (
        "/dev/vda / ext4 rw 0 0\n"
        f"server:/export {tmp_path}/nfs nfs4 rw 0 0\n"
        f"//nas/share {tmp_path}/smb\\040share cifs rw 0 0\n"
        f"me@host:/x {tmp_path}/ssh fuse.sshfs rw 0 0\n"
        f"tmpfs {tmp_path}/ssh/local tmpfs rw 0 0\n"
    )
    for rel, fs in [("nfs/lane", "nfs4"), ("smb share/lane", "cifs"), ("ssh/q", "fuse.sshfs")]:
        reason = synced_folder_reason(tmp_path / rel, mounts)
        assert reason is not None and fs in reason
    assert synced_folder_reason(tmp_path / "ssh/local/q", mounts) is None  # nested local mount
    assert synced_folder_reason(tmp_path / "plain", mounts) is None
    assert mount_fstype(tmp_path / "smb share", mounts) == (f"{tmp_path}/smb share", "cifs")


def test_cli_refuses_synced_state_dir(tmp_path: Path, lane_env: dict[str, str]) -> None:
    env = dict(lane_env, LANE_STATE_DIR=str(tmp_path / "Dropbox" / "lane"))
    r = lane("status", "--lane", LANE, env=env)
    assert r.code == 1 and "SQLite WAL is not a cross-machine protocol" in r.err
    assert not (tmp_path / "Dropbox").exists()


def test_cli_local_queue_round_trip(lane_env: dict[str, str]) -> None:
    env = dict(lane_env, LANE_MACHINE_ID="studio-a")
    acq = lane("acquire", "--lane", LANE, "--project", "p", "--scene", "s", "--prompt-hash",
               "h", "--json", env=env)  # fmt: skip
    assert acq.code == 0, acq.err
    assert "local single-computer queue" in acq.err
    t = acq.json()["ticket"]["ticketId"]
    st = lane("status", "--lane", LANE, "--json", "--verbose", env=env).json()
    assert st["coordinator"] == "local-sqlite" and "recentReceipts" not in st
    assert [x["ticketId"] for x in st["held"]] == [t]
    rel = lane("release", "--lane", LANE, "--ticket", t, "--outcome", "completed", env=env)
    assert rel.code == 0, rel.err
    assert list(Path(env["LANE_STATE_DIR"]).glob("*.sqlite")) != []
