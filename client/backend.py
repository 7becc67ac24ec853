"""`BackendBase`: what the shared coordinator's client (`LaneClient`) and the local queue
(`LocalQueue`) share as objects — an async context manager that closes on exit, and the
request body every lane operation starts from. The type a driver codes against is
`client.api.LaneBackend` (a Protocol); this is only the implementation base class."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Any, Self

from coordinator.protocol.constants import PROTOCOL_VERSION


class BackendBase(ABC):
    """`async with backend:` closes the backend on exit."""

    machine_id: str
    claim_id: str | None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @abstractmethod
    async def close(self) -> None:
        """Release what the backend holds (HTTP session, lane files)."""

    def _body(self, lane: str, **fields: Any) -> dict[str, Any]:
        """A lane operation's request body: protocol version, lane, this machine and claim,
        and every given field that is not None."""
        body: dict[str, Any] = {
            "protocolVersion": PROTOCOL_VERSION,
            "lane": lane,
            "machineId": self.machine_id,
        }
        if self.claim_id is not None:
            body["claimId"] = self.claim_id
        body.update({k: v for k, v in fields.items() if v is not None})
        return body
