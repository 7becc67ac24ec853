"""The coordinator's errors: one class per SPEC error code, and the store boundary error."""

from __future__ import annotations

from typing import Any, ClassVar


class LaneError(Exception):
    """An error with a SPEC error code and HTTP status, safe to show to a caller."""

    code: ClassVar[str] = "bad-request"
    status: ClassVar[int] = 400

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra

    def body(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        err.update(self.extra)
        return {"error": err}


class BadRequest(LaneError):
    code = "bad-request"
    status = 400


class UnsupportedProtocol(LaneError):
    code = "unsupported-protocol"
    status = 400


class Unauthorized(LaneError):
    code = "unauthorized"
    status = 401


class NotOwner(LaneError):
    code = "not-owner"
    status = 403


class NotHolder(LaneError):
    code = "not-holder"
    status = 403


class NotFound(LaneError):
    code = "not-found"
    status = 404


class MethodNotAllowed(LaneError):
    """A known path with a method it does not serve; the reply's Allow header lists them."""

    code = "method-not-allowed"
    status = 405


class TicketNotHeld(LaneError):
    code = "ticket-not-held"
    status = 409


class ReceiptConflict(LaneError):
    code = "receipt-conflict"
    status = 409


class PayloadTooLarge(LaneError):
    code = "payload-too-large"
    status = 413


class UnsupportedMediaType(LaneError):
    code = "unsupported-media-type"
    status = 415


class Unavailable(LaneError):
    code = "unavailable"
    status = 503


class StoreError(Unavailable):
    """A storage driver failure, wrapped at the store boundary (never the driver's text)."""


class ConfigError(Exception):
    """The server's configuration or token is unusable; the message says how to fix it."""
