"""Driver helpers (docs/protocol.md#driver-rules; docs/driver-guide.md): a render driver's turn on a
lane, its live-job journal and its receipts.

    from client.driver import Journal, Turn, hash_file
    async with Turn(backend, lane, project, scene, prompt_hash, journal=journal) as turn:
        status = await turn.run(submit=..., poll=..., reconcile=...)

| module | what |
|---|---|
| turn.py | `Turn`: acquire or adopt, wait for the grant, exit with the right outcome |
| base.py | the turn's options and state (the layers below build on it) |
| heartbeat.py | the heartbeat loop, lease lost, `check()`, `guard()`, the release |
| submit.py | crash-safe submit, reconcile, poll, resume, `run()` |
| human_check.py | the provider human check: cooldown on the held ticket |
| claim.py | `claim_view`: the backend speaking as another claim (adoption) |
| options.py | `WaitUpdate`, `human_check_cooldown_seconds()` |
| sync_turn.py | `SyncTurn`: the same turn for plain Python, on `SyncLaneClient` |
| errors.py | `DriverError` and its subclasses, `NotSubmitted`, `ProviderHumanCheck` |
| journal.py | `Journal`: the live-job record (SQLite; schema in migrations/) |
| receipts.py | receipt phases, ids, hashes, payload builders, the `Receipts` writer |
| payload_check.py | `check_payload`: refuses prompts, paths, tokens and account names |
| example.py | `python -m client.example_driver`: a driver against a simulated provider |
"""

from __future__ import annotations

from client.driver.claim import claim_view
from client.driver.errors import (
    AlreadySubmitted,
    DriverError,
    LeaseLost,
    NotGranted,
    NotSubmitted,
    ProviderHumanCheck,
    ReconcileRequired,
    TurnNotHeld,
    WindowBusy,
)
from client.driver.heartbeat import MAX_NOTE, REFUSALS_TO_LOSE
from client.driver.journal import NEEDS_LEASE_LOST, NEEDS_RECONCILE, Journal, Record, Window
from client.driver.options import WaitUpdate, human_check_cooldown_seconds
from client.driver.payload_check import check_payload
from client.driver.receipts import Receipts, hash_bytes, hash_file
from client.driver.submit import MAX_JOB_ID, POLL_STATUSES
from client.driver.sync_turn import SyncTurn
from client.driver.turn import Turn

__all__ = [
    "MAX_JOB_ID",
    "MAX_NOTE",
    "NEEDS_LEASE_LOST",
    "NEEDS_RECONCILE",
    "POLL_STATUSES",
    "REFUSALS_TO_LOSE",
    "AlreadySubmitted",
    "DriverError",
    "Journal",
    "LeaseLost",
    "NotGranted",
    "NotSubmitted",
    "ProviderHumanCheck",
    "Receipts",
    "ReconcileRequired",
    "Record",
    "SyncTurn",
    "Turn",
    "TurnNotHeld",
    "WaitUpdate",
    "Window",
    "WindowBusy",
    "check_payload",
    "claim_view",
    "hash_bytes",
    "hash_file",
    "human_check_cooldown_seconds",
]
