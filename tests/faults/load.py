"""The campaign's load: the shared client loop (tests/harness/load.py, retries and the
ledger described there) with the campaign's eight clients on three lanes. A lease that
expires under a client (the server frozen longer than a lease) is a path of the protocol
here, handled as a driver does: the client releases with `lease-lost` (`Client.lease_lost`
counts them). A share of the eight clients' cycles (not the extra clients') submit a
(simulated) provider job with its receipts: some of those are released `lease-lost` and, on a
short lease, one a client is left to expire — each leaves an in-flight hold that the
provider-terminal receipt ends — so the checker's in-flight rule (f) has holds to judge (the
lanes' hold: the coordinator's default)."""

from __future__ import annotations

from dataclasses import replace

from coordinator.constants import DEFAULT_IN_FLIGHT_HOLD_SECONDS
from tests.harness.load import Load, Settings, Target

JOBS = 0.3  # of the cycles submit a provider job
ABANDON_JOBS = 0.03  # of the jobs, on a short lease: left to expire (at most one per client)

#: The base load: eight clients on three lanes (`solo:*` capacity 1, `duo:*` capacity 2).
BASE_LANES = ["solo:fa"] * 3 + ["solo:fb"] * 2 + ["duo:fa"] * 3


def base_load(
    target: Target,
    settings: Settings | None = None,
    *,
    seed: int = 0,
    more: list[list[str]] | None = None,
) -> Load:
    """The eight clients (one lane each), and one more client per entry of `more` (its
    lanes, round robin), until `finish()`."""
    lanes = [[lane] for lane in BASE_LANES] + (more or [])
    settings = replace(settings or Settings(), jobs=JOBS, abandon_jobs=ABANDON_JOBS)
    return Load(
        target, lanes, settings, seed=seed, lease_loss=True,
        hold_seconds=DEFAULT_IN_FLIGHT_HOLD_SECONDS, job_clients=len(BASE_LANES),
    )  # fmt: skip
