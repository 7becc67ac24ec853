"""Reading a request body: size, deadline and Content-Encoding, done by the app itself.

aiohttp's parser would otherwise decode a compressed body as it arrives, before the app has
looked at the token: `create_app` turns that off (`auto_decompress=False`), so a body is
read and decoded here, only for a request that passed auth, within `max_body_bytes` both
before and after decoding, and any failure is an error in the protocol's shape (never a
traceback). Accepted codings: identity, gzip (x-gzip) and deflate; any other is 415
`unsupported-media-type`.
"""

from __future__ import annotations

import asyncio
import re
import zlib

from aiohttp import web

from coordinator.protocol.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType

CODINGS = ("gzip", "deflate")  # besides identity; x-gzip is gzip
_SHOWN_CODING = re.compile(r"[a-z0-9._+-]{1,32}")


def content_coding(header: str | None) -> str | None:
    """The one coding a Content-Encoding header applies (None: identity), or 415."""
    if not header:
        return None
    names = [n.strip().lower() for n in header.split(",")]
    names = [n for n in names if n and n != "identity"]
    if not names:
        return None
    if len(names) > 1:
        raise UnsupportedMediaType("Content-Encoding: at most one coding (gzip or deflate)")
    name = "gzip" if names[0] == "x-gzip" else names[0]
    if name not in CODINGS:
        shown = name if _SHOWN_CODING.fullmatch(name) else "this coding"
        raise UnsupportedMediaType(
            f"Content-Encoding: {shown} is not supported; send identity, gzip or deflate"
        )
    return name


def _is_zlib(raw: bytes) -> bool:
    """RFC 9110's deflate is the zlib format; some clients send raw deflate instead."""
    return len(raw) >= 2 and raw[0] & 0x0F == 8 and (raw[0] << 8 | raw[1]) % 31 == 0


def decode_content(raw: bytes, coding: str | None, limit: int) -> bytes:
    """`raw` with its coding undone, at most `limit` bytes once decoded (else 413); data that
    does not decode, is cut short or has bytes after its end is 400."""
    if coding is None:
        return raw
    if coding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    else:
        wbits = zlib.MAX_WBITS if _is_zlib(raw) else -zlib.MAX_WBITS
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(raw, limit + 1)
    except zlib.error:
        raise BadRequest(f"body: not valid {coding} data (Content-Encoding: {coding})") from None
    if len(out) > limit:
        raise PayloadTooLarge(f"body: larger than {limit} bytes once decoded")
    if not d.eof:
        raise BadRequest(f"body: the {coding} data is cut short")
    if d.unused_data:
        raise BadRequest(f"body: data after the end of the {coding} data")
    return out


async def read_body(request: web.Request, limit: int, timeout: float) -> bytes:
    """The body as sent (415 for a coding not supported, before reading it), within
    `timeout` seconds (else 400), decoded and at most `limit` bytes (else 413)."""
    coding = content_coding(request.headers.get("Content-Encoding"))
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"body: larger than {limit} bytes")
    try:
        if request.content.is_eof():  # all of it arrived with the headers: nothing to wait for
            raw = await request.read()
        else:
            async with asyncio.timeout(timeout):
                raw = await request.read()  # the app's client_max_size (= limit) applies: 413
    except TimeoutError:
        raise BadRequest(f"body: not received within {timeout:g} s") from None
    except web.RequestPayloadError:  # a malformed chunked body, or one cut short
        msg = "body: could not be read (malformed chunked encoding or cut short)"
        raise BadRequest(msg) from None
    except ConnectionError:  # the client went away mid-body: its error, not ours (no 503)
        raise BadRequest("body: the connection was lost before the body was complete") from None
    if len(raw) > limit:
        raise PayloadTooLarge(f"body: larger than {limit} bytes")
    return decode_content(raw, coding, limit)
