"""`Forward`: an attribute a wrapper reads from (and, when `settable`, writes to) the object it
wraps — how the sync facades (`SyncLaneClient`, `SyncTurn`) show the state of the backend or
turn they drive without a property each.

    class SyncTurn:
        fence: Forward[int | None] = Forward("turn")            # reads self.turn.fence
        note: Forward[str | None] = Forward("turn", settable=True)
"""

from __future__ import annotations

from typing import Any, Generic, Self, TypeVar, overload

T = TypeVar("T")


class Forward(Generic[T]):
    """The attribute of the same name on `getattr(owner, inner)`."""

    def __init__(self, inner: str, *, settable: bool = False) -> None:
        self._inner = inner
        self._settable = settable
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(getattr(obj, self._inner), self._name)

    def __set__(self, obj: object, value: T) -> None:
        if not self._settable:
            raise AttributeError(f"{type(obj).__name__}.{self._name} is read-only")
        setattr(getattr(obj, self._inner), self._name, value)


__all__ = ["Forward"]
