"""The lane client: an async library (`LaneClient`), a local single-computer queue
(`LocalQueue`), a sync facade, settings, and the `lane` CLI. See docs/client.md.

`LocalQueue` and the settings (which can build one) are imported on first use: they run the
coordinator's lane core and SQLite store in-process, and `import client.api` — a driver that
only talks to a shared coordinator — must not load any server code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from client.api import LaneBackend, LaneClient
from client.errors import LaneClientError, PreProviderError
from coordinator import __version__  # one version for both packages (pyproject reads it)

if TYPE_CHECKING:
    from client.config import Settings, connect, load_settings
    from client.local import LocalQueue

_LAZY = {
    "LocalQueue": "client.local",
    "Settings": "client.config",
    "connect": "client.config",
    "load_settings": "client.config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
