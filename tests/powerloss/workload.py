"""The load the power-loss tests run: the shared client loop (tests/harness/load.py, retries
and the ledger described there) with the power-loss settings: each call retries for up to
30 s (the server restarts on a new port, `Target.urls` is set to it), a shorter backoff,
1 s awaits and brief holds. A lease that expires under a client is a problem (leases are the
server's default 300 s). `Load.move(spread(lanes, clients))` moves the clients to new lanes
(a new lane is a new file)."""

from __future__ import annotations

from tests.harness.history import Ledger
from tests.harness.load import Load, Settings, Target, spread

SETTINGS = Settings(
    op_deadline=30.0, backoff=0.01, backoff_max=0.2, await_seconds=1, hold=(0.0, 0.03)
)


def start_load(
    target: Target, lanes: list[str], clients: int, ledger: Ledger, seed: int = 0
) -> Load:
    """`clients` clients, client n on lanes[n % len(lanes)], until `finish()` or `abort()`."""
    return Load(target, spread(lanes, clients), SETTINGS, seed=seed, ledger=ledger)
