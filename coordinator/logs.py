"""structlog setup: one JSON object per line, a stable event name plus lane/ticket/machine."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp.http_exceptions import HttpProcessingError

from coordinator.constants import LOG_INTERVAL_SECONDS

log = structlog.get_logger("coordinator")


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
    lvl = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=lvl)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _MalformedRequestFilter) for f in server_log.filters):
        server_log.addFilter(_MalformedRequestFilter())
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(sort_keys=True),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


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
