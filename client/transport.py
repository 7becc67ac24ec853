"""The HTTP transport under `LaneClient` (client/api.py): the aiohttp session, one request
with its timeout and its retries, the mapping of every failure to a client error (and, under
`required=True`, to `PreProviderError`), the reply-kind check and reply conversion.

Retries (docs/client.md#retries): a call whose attempt fails at the connection level (refused,
reset, the server disconnected before its reply, a reply cut short) or is answered 503
`unavailable` is sent again, after an exponential backoff with jitter, while the call's own
timeout leaves time for another attempt; then the last attempt's error is raised exactly as
without retries. Every lane call is safe to repeat (the coordinator deduplicates by identity,
ticket or receiptId); no 4xx answer and no other failure is ever retried."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import msgspec

from client.backend import BackendBase
from client.clock import monotonic
from client.errors import (
    ConfigError,
    CoordinatorTimeoutError,
    CoordinatorUnreachableError,
    LaneClientError,
    MalformedReplyError,
    PreProviderError,
    UnavailableError,
    UnsupportedProtocolError,
    error_for,
)
from coordinator import __version__
from coordinator.protocol import constants as P

S = TypeVar("S")

# ---- retries: every default once, with its unit ------------------------------------------
RETRY_FIRST_DELAY_SECONDS = 0.05  # the pause before the first retry; each later one doubles
RETRY_MAX_DELAY_SECONDS = 1.0  # no pause between two attempts is longer
RETRY_JITTER_FRACTION = 0.5  # each pause is drawn from [(1 - this) × delay, delay]
RETRY_MIN_ATTEMPT_SECONDS = 0.2  # a retry is sent only with at least this much time left
RETRY_UNLIMITED_ATTEMPTS = 0  # `max_attempts` value: as many as the call's timeout allows
_MAX_DOUBLINGS = 30  # 0.05 s × 2**30 is far beyond any cap: no float overflow on a long run


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed idempotent call is retried: the n-th retry waits a random time in
    [(1 - RETRY_JITTER_FRACTION) × d, d] with d = min(max_delay, first_delay × 2**(n-1)),
    shortened so that RETRY_MIN_ATTEMPT_SECONDS of the call's timeout are left for it (no
    retry when less is left). `max_attempts` bounds the attempts (RETRY_UNLIMITED_ATTEMPTS:
    only the timeout does; 1: never retry)."""

    first_delay_seconds: float = RETRY_FIRST_DELAY_SECONDS
    max_delay_seconds: float = RETRY_MAX_DELAY_SECONDS
    max_attempts: int = RETRY_UNLIMITED_ATTEMPTS

    def __post_init__(self) -> None:
        if not 0 < self.first_delay_seconds <= self.max_delay_seconds:
            raise ConfigError(message="retry: need 0 < first_delay_seconds <= max_delay_seconds")
        if self.max_attempts < 0:
            raise ConfigError(message="retry: max_attempts must be 0 (unlimited) or more")

    def delay(self, retry: int) -> float:
        """The pause, in seconds, before retry number `retry` (1 = the first retry)."""
        doublings = min(max(retry - 1, 0), _MAX_DOUBLINGS)
        full = min(self.max_delay_seconds, self.first_delay_seconds * 2**doublings)
        return random.uniform(full * (1 - RETRY_JITTER_FRACTION), full)

    def allows(self, attempts: int) -> bool:
        """Whether another attempt may follow `attempts` attempts (the timeout aside)."""
        return self.max_attempts == RETRY_UNLIMITED_ATTEMPTS or attempts < self.max_attempts


DEFAULT_RETRY = RetryPolicy()
NO_RETRY = RetryPolicy(max_attempts=1)


class Answer(NamedTuple):
    """A call's successful HTTP answer: status, JSON object, and `resent` — an earlier
    attempt of this call failed after its request may have reached the coordinator (it may
    have been applied; the answer is then the coordinator's answer to a repeat)."""

    status: int
    data: dict[str, Any]
    resent: bool


def safe_url(url: str) -> str:
    """The URL without any user:password part (never echo a credential)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def url_problem(url: str) -> str | None:
    """Why `url` cannot be the coordinator's base URL (None when it can): checked up front so
    a bad value is a configuration error (a PreProviderError when required), never an
    aiohttp ValueError at the first call."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError when out of range or not a number
    except ValueError:
        return "not a valid URL"
    if parts.scheme not in ("http", "https"):
        return "must start with http:// or https://"
    if not parts.hostname:
        return "no host name"
    if parts.username is not None or parts.password is not None:
        return "must not carry user:password@ (the token goes in LANE_TOKEN)"
    return None


def check_lane_reply_kind(data: dict[str, Any], required: bool, url: str) -> None:
    kind = data.get("coordinator")
    if required and kind not in P.SHARED_KINDS:
        raise PreProviderError(
            f"the coordinator at {url} reports coordinator={kind!r}, "
            f"not one of {sorted(P.SHARED_KINDS)}: "
            "it is not the shared coordinator"
        )


def connect_retryable(exc: aiohttp.ClientConnectorError) -> bool:
    """A connection that could not be made and may be made on the next try (refused, reset,
    no route): not a TLS/certificate failure, not a name that does not resolve."""
    return not isinstance(exc, (aiohttp.ClientSSLError, aiohttp.ClientConnectorDNSError))


def dropped(exc: BaseException) -> bool:
    """The connection failed after the request may have been sent: reset, the server
    disconnected before its reply, or the reply was cut short."""
    return isinstance(
        exc,
        (
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientPayloadError,
            aiohttp.ClientOSError,
            ConnectionError,
        ),
    )


def unavailable(status: int, raw: bytes) -> bool:
    """A 503 whose error body says `unavailable` (the coordinator's "nothing applied, retry")."""
    if status != 503:
        return False
    try:
        decoded: Any = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return False
    e = decoded.get("error") if isinstance(decoded, dict) else None
    return isinstance(e, dict) and e.get("code") == UnavailableError.default_code


def with_attempts(err: LaneClientError, attempts: int, started: float) -> LaneClientError:
    """The error, its message saying how many attempts it took (when more than one)."""
    if attempts > 1:
        err.message = f"{err.message} ({attempts} attempts in {monotonic() - started:.1f} s)"
        err.args = (err.message,)
    return err


class HttpTransport(BackendBase):
    """Requests to the coordinator at `url` with a bearer token (see the module docstring)."""

    url: str
    _token: str
    timeout: float
    required: bool
    retry: RetryPolicy
    _session: aiohttp.ClientSession | None
    _own_session: bool

    async def close(self) -> None:
        if self._own_session and self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None if self._own_session else self._session

    # ------------------------------------------------------------------ transport

    def _client_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            if not self._own_session:
                raise ConfigError(message="the aiohttp session given to LaneClient is closed")
            self._session = aiohttp.ClientSession(
                headers={"User-Agent": f"lane-client/{__version__}"}
            )
        return self._session

    def _fail(self, err: LaneClientError) -> LaneClientError:
        """Under LANE_REQUIRED=1, a failure that leaves the lane unconfirmed is pre-provider."""
        if not self.required or isinstance(err, PreProviderError):
            return err
        where = safe_url(self.url)
        cause: str | None = None
        if isinstance(err, CoordinatorTimeoutError):
            cause = f"timeout: {err.message}"
        elif isinstance(err, CoordinatorUnreachableError):
            cause = f"unreachable: {err.message}"
        elif isinstance(err, MalformedReplyError):
            cause = f"malformed reply from {where}: {err.message}"
        elif err.status == 401:
            cause = f"unauthorized (HTTP 401) at {where}: the token was not accepted"
        elif err.status == 403:
            cause = f"forbidden (HTTP 403 {err.code}) at {where}: {err.message}"
        elif err.status >= 500 or isinstance(err, UnsupportedProtocolError):
            cause = f"coordinator at {where} answered HTTP {err.status} {err.code}: {err.message}"
        return PreProviderError(cause, err) if cause is not None else err

    async def _attempt(
        self,
        method: str,
        path: str,
        data: bytes | None,
        params: dict[str, str] | None,
        headers: dict[str, str],
        seconds: float,
    ) -> tuple[int, bytes, str]:
        """One HTTP exchange within `seconds`: (status, body, content type)."""
        session = self._client_session()
        async with session.request(
            method,
            self.url + path,
            data=data,
            params=params,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=seconds),
            allow_redirects=False,
        ) as resp:
            status, ctype = resp.status, resp.content_type
            return status, await resp.read(), ctype

    def _pause_before(self, attempts: int, deadline: float, floor: float) -> float | None:
        """The pause before another attempt, shortened to leave it `floor` seconds of the
        call's timeout; None when the policy or the time left allows none."""
        if not self.retry.allows(attempts):
            return None
        spare = deadline - monotonic() - floor
        return min(self.retry.delay(attempts), spare) if spare > 0 else None

    async def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
        timeout: float | None = None,
        *,
        long_poll: float | None = None,
    ) -> Answer:
        """One call, retried per `self.retry` within `timeout` (default: the client's). With
        `long_poll` (the body's waitSeconds), a retry asks for no longer a wait than what is
        left of the call's timeout less its margin (the client's timeout), so the retried
        poll is answered within the call's timeout."""
        total = self.timeout if timeout is None else timeout
        started = monotonic()
        deadline = started + total
        what = f"{method} {path}"
        where = safe_url(self.url)
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        floor = RETRY_MIN_ATTEMPT_SECONDS
        if long_poll is not None:
            floor += min(long_poll, P.MIN_AWAIT_SECONDS)
        attempts, resent = 0, False
        failed: tuple[LaneClientError | None, int, bytes, str] | None = None  # last retryable
        err: LaneClientError | None = None
        status, raw, ctype = 0, b"", ""
        while True:
            left = deadline - monotonic()
            if failed is not None and left <= 0:  # the pause overran (a busy event loop)
                err, status, raw, ctype = failed
                break
            attempts += 1
            sent = body
            if body is not None and long_poll is not None and attempts > 1:
                margin = total - long_poll
                wait = max(min(long_poll, P.MIN_AWAIT_SECONDS), min(long_poll, left - margin))
                sent = {**body, "waitSeconds": round(wait, 3)}
            data = msgspec.json.encode(sent) if sent is not None else None
            err, retryable, maybe_applied = None, False, False
            try:
                status, raw, ctype = await self._attempt(
                    method, path, data, params, headers, total if attempts == 1 else left
                )
            except TimeoutError:
                err = CoordinatorTimeoutError(
                    message=f"no answer from {where} within {total:g} s ({what})"
                )
            except aiohttp.ClientConnectorError as exc:
                reason = exc.os_error.strerror if exc.os_error is not None else None
                err = CoordinatorUnreachableError(
                    message=f"cannot connect to {where} ({reason or type(exc).__name__}) ({what})"
                )
                retryable = connect_retryable(exc)
            except aiohttp.InvalidURL:
                err = ConfigError(message=f"LANE_COORDINATOR_URL: {where} is not a valid URL")
            except (aiohttp.ClientError, OSError) as exc:
                err = CoordinatorUnreachableError(
                    message=f"{type(exc).__name__} talking to {where} ({what})"
                )
                retryable = maybe_applied = dropped(exc)
            else:
                retryable = maybe_applied = unavailable(status, raw)
            if isinstance(err, CoordinatorTimeoutError) and failed is not None:
                # A retry that ran out of time: the answer is what the coordinator (or the
                # network) last said, as it would be without retries.
                err, status, raw, ctype = failed
                break
            if retryable:
                resent = resent or maybe_applied
                failed = (err, status, raw, ctype)
                pause = self._pause_before(attempts, deadline, floor)
                if pause is not None:
                    await asyncio.sleep(pause)
                    continue
            break
        if err is not None:
            if isinstance(err, ConfigError) and self.required:
                raise PreProviderError(err.message, err) from None
            raise self._fail(with_attempts(err, attempts, started)) from None
        return Answer(*self._decode(status, raw, ctype, what, attempts, started), resent)

    def _decode(
        self, status: int, raw: bytes, ctype: str, what: str, attempts: int, started: float
    ) -> tuple[int, dict[str, Any]]:
        """The answer's JSON object, or the client error it stands for."""
        try:
            decoded: Any = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            raise self._fail(
                MalformedReplyError(
                    status=status,
                    message=f"{what}: HTTP {status} reply is not JSON "
                    f"(content type {ctype or 'none'})",
                )
            ) from None
        if status >= 400:
            e = decoded.get("error") if isinstance(decoded, dict) else None
            if isinstance(e, dict) and isinstance(e.get("code"), str):
                msg = e.get("message")
                err = error_for(e["code"], status, msg if isinstance(msg, str) else e["code"])
                raise self._fail(with_attempts(err, attempts, started)) from None
            raise self._fail(
                MalformedReplyError(
                    status=status, message=f"{what}: HTTP {status} without an error body"
                )
            ) from None
        if status not in (200, 201) or not isinstance(decoded, dict):
            raise self._fail(
                MalformedReplyError(
                    status=status,
                    message=f"{what}: expected a JSON object with HTTP 200/201, got HTTP {status}",
                )
            ) from None
        check_lane_reply_kind(decoded, self.required, safe_url(self.url))
        reported = decoded.get("coordinator")
        if reported in P.SHARED_KINDS:
            self.reported_kind = reported  # which shared coordinator answered last
        return status, decoded

    def _convert(self, data: dict[str, Any], kind: type[S], what: str, status: int = 200) -> S:
        try:
            return msgspec.convert(data, kind)
        except msgspec.ValidationError as exc:
            raise self._fail(
                MalformedReplyError(
                    status=status, message=f"{what}: reply does not match the protocol ({exc})"
                )
            ) from None

    async def _post(
        self,
        op: str,
        body: dict[str, Any],
        kind: type[S],
        timeout: float | None = None,
        *,
        long_poll: float | None = None,
    ) -> S:
        path = f"/v1/lanes/{op}"
        answer = await self._request("POST", path, body, timeout=timeout, long_poll=long_poll)
        return self._convert(answer.data, kind, f"POST {path}", answer.status)

    async def _get(self, path: str, kind: type[S], params: dict[str, str] | None = None) -> S:
        answer = await self._request("GET", path, params=params)
        return self._convert(answer.data, kind, f"GET {path}", answer.status)
