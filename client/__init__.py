"""The lane client: an async library (`LaneClient`), a local single-computer queue
(`LocalQueue`), a sync facade, settings, and the `lane` CLI. See docs/client.md."""

from __future__ import annotations

from client.api import LaneBackend, LaneClient
from client.config import Settings, connect, load_settings
from client.errors import LaneClientError, PreProviderError
from client.local import LocalQueue

__all__ = [
    "LaneBackend",
    "LaneClient",
    "LaneClientError",
    "LocalQueue",
    "PreProviderError",
    "Settings",
    "connect",
    "load_settings",
]
