"""The coordinator's own errors: the store boundary error and the configuration error. The
protocol's error classes (one per error code) live in `coordinator.protocol.errors`."""

from __future__ import annotations

from coordinator.protocol.errors import Unavailable


class StoreError(Unavailable):
    """A storage driver failure, wrapped at the store boundary (never the driver's text).
    `reason`: a short, safe cause when known ("EMFILE", "corrupt file (...)", ...)."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


class ConfigError(Exception):
    """The server's configuration or token is unusable; the message says how to fix it."""
