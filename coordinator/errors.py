"""The coordinator's errors: the protocol's error classes (one per error code, defined in
`coordinator.protocol.errors` and importable from here), the store boundary error and the
configuration error."""

from __future__ import annotations

from coordinator.protocol.errors import (
    BadRequest,
    LaneError,
    MethodNotAllowed,
    NotFound,
    NotHolder,
    NotOwner,
    PayloadTooLarge,
    ReceiptConflict,
    TicketNotHeld,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
    UnsupportedProtocol,
)

__all__ = [
    "BadRequest",
    "ConfigError",
    "LaneError",
    "MethodNotAllowed",
    "NotFound",
    "NotHolder",
    "NotOwner",
    "PayloadTooLarge",
    "ReceiptConflict",
    "StoreError",
    "TicketNotHeld",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
    "UnsupportedProtocol",
]


class StoreError(Unavailable):
    """A storage driver failure, wrapped at the store boundary (never the driver's text).
    `reason`: a short, safe cause when known ("EMFILE", "corrupt file (...)", ...)."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


class ConfigError(Exception):
    """The server's configuration or token is unusable; the message says how to fix it."""
