"""structlog setup: one JSON object per line, a stable event name plus lane/ticket/machine."""

from __future__ import annotations

import logging
import sys

import structlog
from aiohttp.http_exceptions import HttpProcessingError


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
