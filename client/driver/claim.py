"""Claims (docs/protocol.md#driver-rules: one claim per driver process): `claim_view` gives the
backend speaking as another claim of this computer — how a restarted driver adopts the ticket its
crashed predecessor left live under the claim the journal recorded."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client.api import LaneBackend


def claim_view(backend: LaneBackend, claim_id: str | None) -> LaneBackend | None:
    """The backend speaking as `claim_id` (None when it cannot: no `with_claim`)."""
    if claim_id == backend.claim_id:
        return backend
    make = getattr(backend, "with_claim", None)
    if make is None:
        return None
    view: LaneBackend = make(claim_id)
    return view


__all__ = ["claim_view"]
