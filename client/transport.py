"""The HTTP transport under `LaneClient` (client/api.py): the aiohttp session, one request
with its timeout, the mapping of every failure to a client error (and, under
`required=True`, to `PreProviderError`), the reply-kind check and reply conversion."""

from __future__ import annotations

from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import msgspec

from client.backend import Backend
from client.errors import (
    ConfigError,
    CoordinatorTimeoutError,
    CoordinatorUnreachableError,
    LaneClientError,
    MalformedReplyError,
    PreProviderError,
    UnsupportedProtocolError,
    error_for,
)
from coordinator import __version__
from coordinator.protocol import constants as P

S = TypeVar("S")


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


class HttpTransport(Backend):
    """Requests to the coordinator at `url` with a bearer token (see the module docstring)."""

    url: str
    _token: str
    timeout: float
    required: bool
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

    async def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> tuple[int, dict[str, Any]]:
        total = self.timeout if timeout is None else timeout
        what = f"{method} {path}"
        where = safe_url(self.url)
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        data: bytes | None = None
        if body is not None:
            data = msgspec.json.encode(body)
            headers["Content-Type"] = "application/json"
        err: LaneClientError | None = None
        status, raw, ctype = 0, b"", ""
        try:
            session = self._client_session()
            async with session.request(
                method,
                self.url + path,
                data=data,
                params=params,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=total),
                allow_redirects=False,
            ) as resp:
                status, ctype = resp.status, resp.content_type
                raw = await resp.read()
        except TimeoutError:
            err = CoordinatorTimeoutError(
                message=f"no answer from {where} within {total:g} s ({what})"
            )
        except aiohttp.ClientConnectorError as exc:
            reason = exc.os_error.strerror if exc.os_error is not None else None
            err = CoordinatorUnreachableError(
                message=f"cannot connect to {where} ({reason or type(exc).__name__}) ({what})"
            )
        except aiohttp.InvalidURL:
            err = ConfigError(message=f"LANE_COORDINATOR_URL: {where} is not a valid URL")
        except (aiohttp.ClientError, OSError) as exc:
            err = CoordinatorUnreachableError(
                message=f"{type(exc).__name__} talking to {where} ({what})"
            )
        if err is not None:
            if isinstance(err, ConfigError) and self.required:
                raise PreProviderError(err.message, err) from None
            raise self._fail(err) from None
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
                raise self._fail(
                    error_for(e["code"], status, msg if isinstance(msg, str) else e["code"])
                ) from None
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
        check_lane_reply_kind(decoded, self.required, where)
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
        self, op: str, body: dict[str, Any], kind: type[S], timeout: float | None = None
    ) -> S:
        path = f"/v1/lanes/{op}"
        status, data = await self._request("POST", path, body, timeout=timeout)
        return self._convert(data, kind, f"POST {path}", status)

    async def _get(self, path: str, kind: type[S], params: dict[str, str] | None = None) -> S:
        status, data = await self._request("GET", path, params=params)
        return self._convert(data, kind, f"GET {path}", status)
