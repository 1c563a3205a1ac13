"""Sentinels and wrappers that callers of the cache core pass or receive."""

from __future__ import annotations

import enum
from typing import Final, Generic, TypeVar

V = TypeVar("V")


class Missing(enum.Enum):
    """The type of `MISSING`: one member, so `x is MISSING` narrows for mypy."""

    MISSING = "MISSING"

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


#: Returned by `get`/`peek` on a miss; a cached `None` is a hit, not a miss.
MISSING: Final = Missing.MISSING


class DoNotCache(Generic[V]):
    """Wrap a loader's result that waiters should get but the cache must not keep.

    Loaders return it for transient failures (a timed-out query answered with
    a fallback), so the fallback is not served as truth for a whole TTL.
    """

    __slots__ = ("value",)

    def __init__(self, value: V) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"DoNotCache({self.value!r})"
