"""The campaign's load: the shared client loop (tests/harness/load.py, retries and the
ledger described there) with the campaign's eight clients on three lanes. A lease that
expires under a client (the server frozen longer than a lease) is a path of the protocol
here, handled as a driver does: the client releases with `lease-lost` (`Client.lease_lost`
counts them)."""

from __future__ import annotations

from tests.harness.load import Load, Settings, Target

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
    return Load(target, lanes, settings, seed=seed, lease_loss=True)
