"""The protocol's errors: one class per error code, with its HTTP status.

A `LaneError` is safe to show to a caller: its message names the field or the rule and never
echoes a token. `reply()` is its wire form (`ErrorReply` under /v1, `PlainErrorReply`
outside).
"""

from __future__ import annotations

from typing import ClassVar

from coordinator.protocol.replies import ErrorCode, ErrorDetail, ErrorReply, PlainErrorReply


class LaneError(Exception):
    """An error with a protocol error code and HTTP status, safe to show to a caller."""

    code: ClassVar[ErrorCode] = "bad-request"
    status: ClassVar[int] = 400

    def __init__(self, message: str, *, supported: list[int] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.supported = supported  # unsupported-protocol: the versions this side speaks

    def detail(self) -> ErrorDetail:
        if self.supported is None:
            return ErrorDetail(code=self.code, message=self.message)
        return ErrorDetail(code=self.code, message=self.message, supported=self.supported)

    def reply(self, coordinator: str | None = None) -> ErrorReply | PlainErrorReply:
        """The error body; under /v1 it names the coordinator like every /v1 reply."""
        if coordinator is None:
            return PlainErrorReply(error=self.detail())
        return ErrorReply(coordinator=coordinator, error=self.detail())


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


class RoleForbidden(LaneError):
    """The credential's role does not include the call (docs/protocol.md#credentials)."""

    code = "role-forbidden"
    status = 403


class MachineMismatch(LaneError):
    """A credential bound to one machine named another (docs/protocol.md#credentials)."""

    code = "machine-mismatch"
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


class NotInFlight(LaneError):
    """reconcile: the ticket holds no in-flight slot (docs/protocol.md#reconcile)."""

    code = "not-in-flight"
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


ERRORS: tuple[type[LaneError], ...] = (
    BadRequest,
    UnsupportedProtocol,
    Unauthorized,
    NotOwner,
    NotHolder,
    RoleForbidden,
    MachineMismatch,
    NotFound,
    MethodNotAllowed,
    TicketNotHeld,
    ReceiptConflict,
    NotInFlight,
    PayloadTooLarge,
    UnsupportedMediaType,
    Unavailable,
)
BY_CODE: dict[str, type[LaneError]] = {cls.code: cls for cls in ERRORS}
