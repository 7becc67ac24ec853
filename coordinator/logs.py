"""structlog setup: one JSON object per line, a stable event name plus lane/ticket/machine.

The pipeline is built once (`configure_logging`) and kept lean, since a busy lane logs on its
hot path: the level, an ISO-8601 UTC timestamp (its second formatted once per second), and
the event rendered by msgspec (sorted keys, compact, UTF-8; anything msgspec cannot encode
falls back to json with repr(), as structlog's JSONRenderer does), written as bytes. Lines
logged inside `batched()` on one thread (a lane actor's committed group) reach stderr in one
write. Loggers are cached on first use; `enabled(level)` lets a hot path skip building a
line nobody will see."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

import msgspec
import structlog
from aiohttp.http_exceptions import HttpProcessingError
from structlog.typing import EventDict, WrappedLogger

from coordinator.clock import SystemClock
from coordinator.constants import LOG_INTERVAL_SECONDS

log = structlog.get_logger("coordinator")

_level = logging.NOTSET  # what configure_logging set (structlog's default: every level)
_encoder = msgspec.json.Encoder(order="sorted")


def enabled(level: int) -> bool:
    """Whether a line at `level` (logging.INFO, …) is written at all."""
    return level >= _level


_WALL = SystemClock()


def _iso_stamper(
    wall: Callable[[], float] = _WALL.now,
) -> Callable[[WrappedLogger, str, EventDict], EventDict]:
    """`timestamp` as structlog's TimeStamper(fmt="iso", utc=True) writes it
    (2025-01-02T03:04:05.123456Z; no fraction on a whole second), the date and time part
    formatted once per second. `wall`: the wall clock (coordinator/clock.py's, never a lane's
    injected clock: a log line says when it was written)."""
    cached: list[Any] = [-1, ""]

    def stamp(logger: WrappedLogger, name: str, event: EventDict) -> EventDict:
        now = wall()
        sec = int(now)
        if sec != cached[0]:
            cached[0], cached[1] = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        us = round((now - sec) * 1_000_000)
        if us >= 1_000_000:  # rounded up to the next second
            sec += 1
            cached[0], cached[1] = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
            us = 0
        event["timestamp"] = f"{cached[1]}.{us:06d}Z" if us else f"{cached[1]}Z"
        return event

    return stamp


def _fallback(obj: Any) -> Any:
    try:
        return obj.__structlog__()
    except AttributeError:
        return repr(obj)


def render_json(logger: WrappedLogger, name: str, event: EventDict) -> bytes:
    """The event as one JSON object (sorted keys)."""
    try:
        return _encoder.encode(event)
    except (TypeError, ValueError, OverflowError):  # a type msgspec does not know, a huge int
        return json.dumps(event, sort_keys=True, default=_fallback).encode("utf-8")


class LineWriter:
    """structlog's logger: each rendered line (bytes) to a binary stream, or, inside
    `batched()` on the thread that opened it, kept and written with the others at its end."""

    _lock = threading.Lock()
    _batch: list[bytes] | None = None
    _batch_thread = 0

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file

    def msg(self, message: bytes) -> None:
        batch = LineWriter._batch
        if batch is not None and LineWriter._batch_thread == threading.get_ident():
            batch.append(message)
            return
        self._write(message + b"\n")

    def _write(self, data: bytes) -> None:
        with LineWriter._lock:
            self._file.write(data)
            self._file.flush()

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class _LineWriterFactory:
    def __init__(self, file: IO[bytes]) -> None:
        self._writer = LineWriter(file)

    def __call__(self, *args: Any) -> LineWriter:
        return self._writer


@contextlib.contextmanager
def batched() -> Iterator[None]:
    """Lines logged on this thread inside the block are written together at its end, in one
    write (a lane actor's committed group: one line per ticket, one syscall). Not nested."""
    if LineWriter._batch is not None:  # another thread's batch, or nested: write as usual
        yield
        return
    lines: list[bytes] = []
    LineWriter._batch, LineWriter._batch_thread = lines, threading.get_ident()
    try:
        yield
    finally:
        LineWriter._batch = None
        if lines:
            writer = _writer
            if writer is not None:
                lines.append(b"")
                writer._write(b"\n".join(lines))


_writer: LineWriter | None = None


class _MalformedRequestFilter(logging.Filter):
    """aiohttp logs a request it cannot parse (bad request line, oversized header) at ERROR
    with a traceback. That is the client's error: keep one line, no traceback and no echo
    of the request bytes (they could carry anything, a token included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            said = record.getMessage()
            record.msg = "%s: malformed HTTP request (%s, status %s)"
            record.args = (said, type(exc).__name__, exc.code)
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def configure_logging(level: str = "info") -> None:
    global _level, _writer
    lvl = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=lvl)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _MalformedRequestFilter) for f in server_log.filters):
        server_log.addFilter(_MalformedRequestFilter())
    stream = getattr(sys.stderr, "buffer", None)
    if stream is not None:
        _writer = LineWriter(stream)
        factory: Any = _LineWriterFactory(stream)
        renderer: Any = render_json
    else:  # a text-only stderr (an embedding that replaced it): structlog's own, as str
        _writer = None
        factory = structlog.PrintLoggerFactory(file=sys.stderr)
        renderer = structlog.processors.JSONRenderer(sort_keys=True)
    structlog.configure(
        processors=[structlog.processors.add_log_level, _iso_stamper(), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
    _level = lvl


class RateLimitedLog:
    """One line per `interval` seconds at most (a warning unless `level` says otherwise) for
    an event that can recur as fast as a client can make it (refused connections, malformed
    requests, EMFILE). Each line carries `count`: the events since the previous line, this
    one included."""

    def __init__(
        self,
        event: str,
        interval: float = LOG_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        level: str = "warning",
    ) -> None:
        self.event = event
        self.interval = interval
        self.level = level
        self._clock = clock
        self._last: float | None = None
        self._count = 0

    def __call__(self, **fields: Any) -> bool:
        """Count one event; log a line if none was logged in the last `interval` seconds
        (returns whether it did)."""
        self._count += 1
        now = self._clock()
        if self._last is not None and now - self._last < self.interval:
            return False
        log.log(
            logging.getLevelName(self.level.upper()),
            self.event,
            count=self._count,
            per_seconds=self.interval,
            **fields,
        )
        self._last = now
        self._count = 0
        return True
