"""The lane client: an async library (`LaneClient`), a local single-computer queue
(`LocalQueue`), a sync facade, settings, and the `lane` CLI. See docs/client.md."""

from __future__ import annotations

from client.api import LaneBackend, LaneClient
from client.config import Settings, connect, load_settings
from client.errors import LaneClientError, PreProviderError
from client.local import LocalQueue
from coordinator import __version__  # one version for both packages (pyproject reads it)

__all__ = [
    "LaneBackend",
    "LaneClient",
    "LaneClientError",
    "LocalQueue",
    "PreProviderError",
    "Settings",
    "__version__",
    "connect",
    "load_settings",
]
