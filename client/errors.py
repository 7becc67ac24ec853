"""Client errors: one class per protocol error code, transport failures, and the fail-closed one.

Every message is composed here or taken from the coordinator's `error.message`; none of them
carries a token, and none chains an aiohttp exception (their reprs include request headers).
"""

from __future__ import annotations

from typing import ClassVar


class LaneClientError(Exception):
    """A lane call failed. `code` is the protocol's error code (or a client-side one), `status` the
    HTTP status (0 when there was no HTTP answer)."""

    default_code: ClassVar[str] = "error"

    def __init__(self, code: str | None = None, status: int = 0, message: str = "") -> None:
        self.code = code or self.default_code
        self.status = status
        self.message = message or self.code
        super().__init__(self.message)

    def __str__(self) -> str:
        where = f"HTTP {self.status} " if self.status else ""
        return f"{where}{self.code}: {self.message}"

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(code={self.code!r}, status={self.status}, message={self.message!r})"


# ---- error codes (docs/protocol.md#error-codes) -----------------------------------------


class BadRequestError(LaneClientError):
    default_code = "bad-request"


class UnsupportedProtocolError(LaneClientError):
    default_code = "unsupported-protocol"


class UnauthorizedError(LaneClientError):
    default_code = "unauthorized"


class NotOwnerError(LaneClientError):
    default_code = "not-owner"


class NotHolderError(LaneClientError):
    default_code = "not-holder"


class _Hinted(LaneClientError):
    """An error whose message ends with what this computer's operator can do about it."""

    hint: ClassVar[str] = ""

    def __init__(self, code: str | None = None, status: int = 0, message: str = "") -> None:
        super().__init__(code, status, f"{message} ({self.hint})" if message else self.hint)


class RoleForbiddenError(_Hinted):
    """The credential's role does not include the call (docs/protocol.md#credentials)."""

    default_code = "role-forbidden"
    hint = (
        "this computer's token (LANE_TOKEN, or the one `lane setup` stored) is not a driver "
        "credential: ask the coordinator's operator for one "
        "(lane-coordinator token add NAME --role driver --machine ID) and run `lane setup`"
    )


class MachineMismatchError(_Hinted):
    """The credential is bound to another machine (docs/protocol.md#credentials)."""

    default_code = "machine-mismatch"
    hint = (
        "LANE_MACHINE_ID is not the machine this computer's credential is bound to: set "
        "LANE_MACHINE_ID to that machine, or ask for a credential bound to this one"
    )


class NotFoundError(LaneClientError):
    default_code = "not-found"


class TicketNotHeldError(LaneClientError):
    default_code = "ticket-not-held"


class ReceiptConflictError(LaneClientError):
    default_code = "receipt-conflict"


class NotInFlightError(LaneClientError):
    """reconcile: the ticket holds no in-flight slot (docs/protocol.md#reconcile)."""

    default_code = "not-in-flight"


class PayloadTooLargeError(LaneClientError):
    default_code = "payload-too-large"


class MethodNotAllowedError(LaneClientError):
    default_code = "method-not-allowed"


class UnsupportedMediaTypeError(LaneClientError):
    default_code = "unsupported-media-type"


class UnavailableError(LaneClientError):
    default_code = "unavailable"


# ---- client-side failures ------------------------------------------------------------


class CoordinatorUnreachableError(LaneClientError):
    """No HTTP answer: connection refused, DNS, TLS, reset."""

    default_code = "unreachable"


class CoordinatorTimeoutError(LaneClientError):
    default_code = "timeout"


class MalformedReplyError(LaneClientError):
    """The answer is not JSON, not the shape the protocol fixes, or has an unexpected status."""

    default_code = "malformed-reply"


class ConfigError(LaneClientError):
    """Client configuration is missing or unusable (URL, token, machine id, state dir)."""

    default_code = "config"


class SyncedFolderError(ConfigError):
    """The local queue's state dir is in a synced folder or on a network mount."""

    default_code = "synced-state-dir"


class PreProviderError(LaneClientError):
    """Fail closed (LANE_REQUIRED=1): the lane could not be confirmed, so nothing may be
    submitted to the provider. `cause` names why; `underlying` is the error it replaced
    (None for missing configuration). CLI exit code 3."""

    default_code = "pre-provider"

    def __init__(self, cause: str, underlying: LaneClientError | None = None) -> None:
        self.cause = cause
        self.underlying = underlying
        status = underlying.status if underlying is not None else 0
        super().__init__("pre-provider", status, cause)

    def __str__(self) -> str:
        return f"pre-provider error (fail-closed, nothing was submitted): {self.cause}"


BY_CODE: dict[str, type[LaneClientError]] = {
    cls.default_code: cls
    for cls in (
        BadRequestError,
        UnsupportedProtocolError,
        UnauthorizedError,
        NotOwnerError,
        NotHolderError,
        RoleForbiddenError,
        MachineMismatchError,
        NotFoundError,
        TicketNotHeldError,
        ReceiptConflictError,
        NotInFlightError,
        MethodNotAllowedError,
        PayloadTooLargeError,
        UnsupportedMediaTypeError,
        UnavailableError,
    )
}


def is_transient(exc: LaneClientError) -> bool:
    """A failure that says nothing about the lane (no answer, 5xx): worth retrying."""
    inner = exc.underlying if isinstance(exc, PreProviderError) else exc
    if inner is None:
        return False
    if isinstance(inner, CoordinatorUnreachableError | CoordinatorTimeoutError | UnavailableError):
        return True
    return isinstance(inner, MalformedReplyError) and inner.status >= 500


def error_for(code: str, status: int, message: str) -> LaneClientError:
    """The client error class for a protocol error code (unknown codes keep the base class)."""
    cls = BY_CODE.get(code, LaneClientError)
    return cls(code, status, message)
