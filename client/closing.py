"""`Closing`: a blocking object used as `with obj:` that closes itself on exit (the sync
facade, the driver journal); `client.backend.BackendBase` is the async counterpart."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self


class Closing(ABC):
    """`with obj:` returns the object and calls `close()` on exit."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @abstractmethod
    def close(self) -> None:
        """Release what the object holds."""


__all__ = ["Closing"]
