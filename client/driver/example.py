"""An example render driver against a SIMULATED provider (no network, no credits).

    python -m client.example_driver --lane drill:example
    python -m client.example_driver --lane drill:example --demo-crash     # crash, then resume
    python -m client.example_driver --lane drill:example --human-check

(`client.example_driver` is the short name of this module, client/driver/example.py.)

It shows the whole flow of docs/driver-guide.md: acquire (wait for the grant) -> receipts
(lease-acquired, references-applied) -> submit -> poll -> terminal (provider-submitted,
provider-terminal receipts) -> release; and a restart after a crash: the live-job record
(client/driver/journal.py) makes the next run resume (poll) the job instead of submitting again.

`--demo-crash` runs a first driver (a child process) that submits and dies without cleanup on a
short lease (15 s unless --lease-seconds says otherwise), waits for that lease to run out —
nobody heartbeats it — and restarts the window here. On the shared coordinator the lane keeps the
dead run's slot for its job (an in-flight hold, docs/protocol.md#in-flight): the restarted run
finds the old ticket in the lane's `inFlight`, acquires NOTHING (a new ticket would queue behind
its own job), polls the job and writes `provider-terminal` on the old ticket, which ends the hold
and promotes the next waiter; it prints `resumed under the in-flight hold of ticket …`. Without a
hold (the local queue, or holds off) it acquires a new ticket and resumes the job on it.

Configuration is the client's (docs/protocol.md#client-config): LANE_COORDINATOR_URL, LANE_TOKEN,
LANE_MACHINE_ID, ... — without LANE_COORDINATOR_URL it runs on the local single-computer queue (no
receipts). Use a drill lane, never a production account: the simulated provider spends nothing, but
the turn holds a real slot on the lane while it runs.

The simulated provider keeps its jobs in a JSON file (`--provider-dir`, default
`<state dir>/simulated-provider`) so a restarted process can poll a job an earlier one
submitted; `--crash-at` ends the process with exit code 17 (os._exit, like a kill -9) at
one of: before-submit, during-submit (the provider accepted the job, the driver never got
its id), after-submit, during-poll. A summary JSON is printed on stdout at the end.
Exit codes: 0 done (also after a human check: released not-submitted), 1 the render failed,
2 usage, 3 pre-provider error (fail-closed), 17 a simulated crash.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from client.api import LaneBackend
from client.clock import monotonic, wall
from client.config import ENV_CLAIM, connect, load_settings
from client.driver.errors import LeaseLost, ProviderHumanCheck, WindowBusy
from client.driver.journal import Journal
from client.driver.options import WaitUpdate
from client.driver.receipts import hash_bytes
from client.driver.turn import Turn
from client.errors import LaneClientError, PreProviderError

CRASH_EXIT: Final = 17
DEMO_LEASE_SECONDS: Final = 15.0  # --demo-crash: the crashed run's lease (the shortest allowed)
LEASE_SECONDS: Final = 60.0
CRASH_POINTS: Final = ("before-submit", "during-submit", "after-submit", "during-poll")
PROVIDER_FILE: Final = "simulated-provider.json"


def say(line: str) -> None:
    print(f"example-driver: {line}", file=sys.stderr, flush=True)


def crash(where: str) -> None:
    say(f"simulated crash {where} (exit {CRASH_EXIT}, no cleanup, like kill -9)")
    sys.stderr.flush()
    os._exit(CRASH_EXIT)


class SimulatedProvider:
    """A fake render provider: `submit` mints a job that `poll` reports completed after
    `render_seconds`; `find` reconciles by the request hash (an idempotency key). State
    (jobs and call counters) lives in one JSON file, locked, so processes share it."""

    def __init__(
        self,
        directory: str | Path,
        *,
        render_seconds: float = 1.0,
        fail: bool = False,
        human_check: bool = False,
        crash_during_submit: bool = False,
        crash_during_poll: bool = False,
        poll_interval: float = 0.05,
    ) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / PROVIDER_FILE
        self.render_seconds = render_seconds
        self.fail = fail
        self.human_check = human_check
        self.crash_during_submit = crash_during_submit
        self.crash_during_poll = crash_during_poll
        self.poll_interval = poll_interval

    @contextlib.contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        with open(self.dir / (PROVIDER_FILE + ".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state: dict[str, Any] = json.loads(self.path.read_text())
            except (OSError, ValueError):
                state = {"jobs": {}, "submitCalls": 0, "pollCalls": 0, "findCalls": 0}
            yield state
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
            os.replace(tmp, self.path)

    def stats(self) -> dict[str, Any]:
        with self._state() as st:
            return {k: v for k, v in st.items() if k != "jobs"} | {"jobs": len(st["jobs"])}

    async def submit(self, request_hash: str, idempotency_key: str) -> str:
        await asyncio.sleep(0.01)  # the network round trip
        with self._state() as st:
            st["submitCalls"] += 1
            if self.human_check:
                raise ProviderHumanCheck("simulated Turnstile challenge on submit")
            job_id = "simjob-" + uuid.uuid4().hex[:12]
            st["jobs"][job_id] = {
                "requestHash": request_hash,
                "idempotencyKey": idempotency_key,
                "submittedAt": wall(),
                "renderSeconds": self.render_seconds,
                "fail": self.fail,
            }
        if self.crash_during_submit:
            crash("during submit (the provider accepted the job; its id never came back)")
        return job_id

    async def poll(self, job_id: str) -> str:
        while True:
            with self._state() as st:
                st["pollCalls"] += 1
                job = st["jobs"].get(job_id)
            if job is None:
                return "failed"
            if self.crash_during_poll:
                crash("while polling")
            if wall() - job["submittedAt"] >= job["renderSeconds"]:
                return "failed" if job["fail"] else "completed"
            await asyncio.sleep(self.poll_interval)

    async def find(self, idempotency_key: str) -> str | None:
        """Reconcile: the job this provider accepted under an idempotency key, if any."""
        with self._state() as st:
            st["findCalls"] += 1
            for job_id, job in st["jobs"].items():
                if job["idempotencyKey"] == idempotency_key:
                    return str(job_id)
        return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m client.example_driver",
        description="An example render driver against a simulated provider (no credits).",
    )
    p.add_argument("--lane", required=True, help="route:account (use a drill lane)")
    p.add_argument("--project", default="example")
    p.add_argument("--scene", default="scene-1")
    p.add_argument("--prompt-hash", default=None, help="default: sha256 of a demo prompt")
    p.add_argument("--lease-seconds", type=float, default=None,
                   help=f"default {LEASE_SECONDS:g}; with --demo-crash the crashing run's lease, "
                   f"default {DEMO_LEASE_SECONDS:g}")  # fmt: skip
    p.add_argument("--heartbeat-interval", type=float, default=None)
    p.add_argument("--render-seconds", type=float, default=1.0)
    p.add_argument("--fail", action="store_true", help="the simulated job fails")
    p.add_argument("--human-check", action="store_true", help="the submit hits a human check")
    p.add_argument("--crash-at", choices=CRASH_POINTS, default=None)
    p.add_argument(
        "--demo-crash",
        action="store_true",
        help="run a child driver that crashes after submit, wait for its lease to run out, "
        "then resume here (under the lane's in-flight hold of its ticket)",
    )
    p.add_argument("--provider-dir", default=None)
    p.add_argument("--max-wait", type=float, default=None, help="give up waiting after S s")
    return p.parse_args(argv)


def run_crashing_child(args: argparse.Namespace, provider_dir: Path) -> int:
    """The first run of --demo-crash: another driver process (its own claim) that submits
    and dies before it sees the job end."""
    lease = demo_lease(args)
    cmd = [sys.executable, "-m", "client.example_driver", "--lane", args.lane,
           "--project", args.project, "--scene", args.scene, "--prompt-hash", args.prompt_hash,
           "--lease-seconds", str(lease), "--render-seconds",
           str(args.render_seconds), "--provider-dir", str(provider_dir),
           "--crash-at", "after-submit"]  # fmt: skip
    if args.heartbeat_interval is not None:
        cmd += ["--heartbeat-interval", str(args.heartbeat_interval)]
    env = {k: v for k, v in os.environ.items() if k != ENV_CLAIM}  # a separate driver
    say("demo: starting a first driver that will crash right after its submit")
    code = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=False).returncode
    say(f"demo: the first driver exited with {code}")
    return code


def demo_lease(args: argparse.Namespace) -> float:
    return DEMO_LEASE_SECONDS if args.lease_seconds is None else float(args.lease_seconds)


async def wait_out_the_lease(
    backend: LaneBackend, lane: str, ticket_id: str | None, lease: float
) -> None:
    """--demo-crash: until the crashed run's ticket is no longer held (nobody heartbeats it, so
    the coordinator's alarm reaps it at its expiry); bounded, then the restart goes on anyway."""
    if ticket_id is None:
        return
    deadline = monotonic() + lease + 30.0
    told = False
    while monotonic() < deadline:
        st = await backend.status(lane)
        held = next((t for t in st.held if t.ticket_id == ticket_id), None)
        if held is None:
            return
        if not told:
            left = (held.lease_expires_at or st.now) - st.now
            say(f"demo: waiting for the crashed run's lease on ticket {ticket_id} to run out "
                f"(in {left:.0f} s; nobody heartbeats it)")  # fmt: skip
            told = True
        await asyncio.sleep(0.25)
    say(f"demo: ticket {ticket_id} is still held; restarting the window anyway")


async def drive(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    settings = load_settings()  # mints this process's claim and exports LANE_CLAIM
    provider_dir = Path(args.provider_dir or settings.state_dir / "simulated-provider")
    if args.demo_crash and run_crashing_child(args, provider_dir) != CRASH_EXIT:
        return 1, {"error": "the crashing child did not crash as planned"}
    lease_seconds = LEASE_SECONDS if args.lease_seconds is None else args.lease_seconds
    provider = SimulatedProvider(
        provider_dir,
        render_seconds=args.render_seconds,
        fail=args.fail,
        human_check=args.human_check,
        crash_during_submit=args.crash_at == "during-submit",
        crash_during_poll=args.crash_at == "during-poll",
    )
    journal = Journal.in_state_dir(settings.state_dir)
    summary: dict[str, Any] = {"lane": args.lane, "claim": settings.claim_id}
    resumed = reconciled = False

    def on_wait(w: WaitUpdate) -> None:
        paused = f", paused by {w.pause.machine_id}" if w.pause else ""
        say(f"queued: position {w.position}, eta {w.eta_seconds or 0:.0f} s{paused}")

    backend = None
    turn: Turn | None = None
    code = 0
    try:
        backend = connect(settings)
        turn = Turn(
            backend, args.lane, args.project, args.scene, args.prompt_hash,
            lease_seconds=lease_seconds, heartbeat_interval=args.heartbeat_interval,
            journal=journal, on_wait=on_wait, settings=settings, max_wait=args.max_wait,
        )  # fmt: skip
        if args.demo_crash:
            crashed = journal.get(turn.window)
            old = crashed.ticket_id if crashed is not None else None
            await wait_out_the_lease(backend, args.lane, old, demo_lease(args))
            say("demo: now this driver restarts the window")
        async with turn:
            if turn.under_hold:
                h = turn.hold
                until = "" if h is None else f", {h.hold_until - h.submitted_at:.0f} s at most"
                say(f"resumed under the in-flight hold of ticket {turn.ticket_id} (the lane keeps "
                    f"its slot for the job{until}): no new ticket acquired")  # fmt: skip
            else:
                say(f"held ticket {turn.ticket_id} (fence {turn.fence}"
                    f"{', adopted from the crashed run' if turn.adopted else ''})")  # fmt: skip
            if turn.pending is not None:
                say(f"the journal has this window in {turn.pending.phase!r} "
                    f"(job {turn.pending.provider_job_id}): no new submit")  # fmt: skip
            if turn.needs_reconcile:
                key = turn.attempt_id
                job = await turn.reconcile(lambda: provider.find(key))
                reconciled = True
                say(f"reconciled the unknown submit: provider job {job}")
            if turn.resumable:
                resumed = True
                say(f"resuming provider job {turn.provider_job_id} (polling, not submitting)")
                status = await turn.resume(provider.poll)
            else:
                await turn.references_applied(
                    [hash_bytes(b"example reference 1"), hash_bytes(b"example reference 2")],
                    required_slots=2,
                )
                if args.crash_at == "before-submit":
                    crash("before submit")
                key = turn.attempt_id
                job = await turn.submit(lambda: provider.submit(args.prompt_hash, key))
                say(f"submitted provider job {job}")
                if args.crash_at == "after-submit":
                    crash("after submit, before the job ended")
                status = await turn.poll(provider.poll)
            say(f"provider job {turn.provider_job_id} ended: {status}")
            if turn.under_hold:
                wrote = turn.receipts is not None and any(
                    w.phase == "provider-terminal" for w in turn.receipts.written
                )
                how = "provider-terminal written on" if wrote else "reconciled"
                say(f"{how} the old ticket {turn.ticket_id}: its in-flight hold ended, the "
                    "lane's next waiter (if any) is promoted")  # fmt: skip
            if status != "completed":
                code = 1
    except ProviderHumanCheck:
        say("the provider showed a human check: the lane is paused, released not-submitted")
    except LeaseLost as exc:
        say(str(exc))
        code = 1
    except WindowBusy as exc:
        say(str(exc))
        code = 1
    except PreProviderError as exc:
        say(str(exc))
        code = 3
    finally:
        if turn is not None:
            rec = journal.get(turn.window)
            summary["journal"] = {"phase": rec.phase, "needs": rec.needs} if rec else None
        if backend is not None:
            await backend.close()
        journal.close()
    if turn is not None:
        rel = turn.release_reply
        summary.update(
            ticketId=turn.ticket_id,
            fence=turn.fence,
            adopted=turn.adopted,
            underHold=turn.under_hold,
            holdUntil=turn.hold.hold_until if turn.hold is not None else None,
            resumed=resumed,
            reconciled=reconciled,
            outcome=rel.outcome if rel is not None else None,
            released=turn.released,
            providerJobId=turn.provider_job_id,
            needs=turn.needs,
            leaseLost=turn.lease_lost,
            humanCheck=turn.human_checked,
            receipts={
                "written": [w.phase for w in turn.receipts.written] if turn.receipts else [],
                "dropped": [d.phase for d in turn.receipts.dropped] if turn.receipts else [],
            },
        )
    summary["provider"] = provider.stats()
    return code, summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.prompt_hash is None:
        args.prompt_hash = hash_bytes(f"example prompt for {args.scene}".encode())
    try:
        code, summary = asyncio.run(drive(args))
    except PreProviderError as exc:
        say(str(exc))
        return 3
    except LaneClientError as exc:
        say(f"lane error: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130
    print(json.dumps(summary, sort_keys=True))
    return code


if __name__ == "__main__":
    sys.exit(main())
