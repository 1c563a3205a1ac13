"""The cache registry: every cache by its spec name, with its emergency policy.

Metrics, the admin, the emergency clearer and the invalidation bus reach the
caches only through `registry`. Each entry also names how an operator's typed
key becomes a cache key (`parse_key`) and which named invalidation operations
the layer offers (`ops`); `"key"` and `"all"` exist for every cache.

Like the caches themselves, the registry is meant for the event-loop thread.
It is filled when it is built (`caches.layers.build_registry`, from each
layer's declaration), never at import.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple, Protocol, TypeVar, runtime_checkable

from caches.core.clock import Clock

BUILTIN_OPS = ("key", "all")


class Event(NamedTuple):
    """One invalidation: `registry.apply(cache, op, *args)`."""

    cache: str
    op: str
    args: tuple[Any, ...] = ()


class EmergencyPolicy(StrEnum):
    """What the emergency clearer does to a cache under memory pressure."""

    CLEAR = "clear"
    PRESERVE = "preserve"
    EXPIRED_ONLY = "expired_only"


@runtime_checkable
class ManagedCache(Protocol):
    """What the registry needs from a cache; `BoundedTTLCache` satisfies it."""

    def __len__(self) -> int: ...

    def clear(self) -> int: ...

    def invalidate(self, key: Any) -> int: ...

    def clear_expired(self) -> int: ...

    def stats(self) -> dict[str, Any]: ...

    def set_clock(self, clock: Clock) -> None: ...

    def maps(self) -> Mapping[str, Any]:
        """Return the core maps (`ExpiringStore`s) behind it by label, "primary" first."""
        ...


C = TypeVar("C", bound=ManagedCache)
Op = Callable[..., int]
#: Read one key afresh from the database (the value the layer would cache).
Reload = Callable[[Any], Awaitable[Any]]


class UnknownCacheError(KeyError):
    """Raised for a cache name the registry does not know."""

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(name)
        self.name = name
        self.known = known

    def __str__(self) -> str:
        known = ", ".join(self.known) or "(none registered)"
        return f"unknown cache {self.name!r}; known caches: {known}"


class UnknownOperationError(KeyError):
    """Raised for an invalidation operation a cache does not offer."""

    def __init__(self, name: str, op: str, known: list[str]) -> None:
        super().__init__(op)
        self.name = name
        self.op = op
        self.known = known

    def __str__(self) -> str:
        return (
            f"cache {self.name!r} has no operation {self.op!r}; "
            f"known operations: {', '.join(self.known)}"
        )


def parse_plain_key(text: str) -> Hashable:
    """Return the typed key unchanged, rejecting an empty one."""
    if not text or not text.strip():
        raise ValueError("the key is empty")
    return text


@dataclass
class RegisteredCache:
    """One registry entry: a cache and what operators and the bus may do to it."""

    name: str
    cache: ManagedCache
    policy: EmergencyPolicy
    invalidatable: bool = True
    description: str = ""
    key_help: str = ""
    parse_key: Callable[[str], Hashable] = parse_plain_key
    ops: dict[str, Op] = field(default_factory=dict)
    #: Read a key's value from the database as the layer would cache it
    #: (the consistency watcher compares it with the cached one).
    reload: Reload | None = None
    #: The `caches.layers.declaration.Layer` the entry was built from (None:
    #: registered by hand). Typed loosely: the registry imports no layer.
    layer: Any = None

    def op_names(self) -> list[str]:
        """Return the names of every operation, built-ins first."""
        return [*BUILTIN_OPS, *sorted(self.ops)]


class CacheRegistry:
    """Every cache of this process, by its spec name."""

    def __init__(self) -> None:
        self._entries: dict[str, RegisteredCache] = {}
        #: Names of caches only other processes hold (the catalogs: bot workers).
        self.held_elsewhere: frozenset[str] = frozenset()

    def register(
        self,
        name: str,
        cache: C,
        *,
        policy: EmergencyPolicy | str,
        invalidatable: bool = True,
        description: str = "",
        key_help: str = "",
        parse_key: Callable[[str], Hashable] | None = None,
        ops: dict[str, Op] | None = None,
        reload: Reload | None = None,
    ) -> C:
        """Register `cache` under `name` (replacing any earlier one) and return it."""
        if not isinstance(cache, ManagedCache):
            raise TypeError(f"cache {name!r} does not satisfy ManagedCache")
        clashing = sorted(set(ops or {}) & set(BUILTIN_OPS))
        if clashing:
            raise ValueError(f"cache {name!r}: ops {clashing} are built in")
        self._entries[name] = RegisteredCache(
            name=name,
            cache=cache,
            policy=EmergencyPolicy(policy),
            invalidatable=invalidatable,
            description=description,
            key_help=key_help,
            parse_key=parse_key or parse_plain_key,
            ops=dict(ops or {}),
            reload=reload,
        )
        return cache

    def register_layer(self, layer: Any, cache: C) -> C:
        """Register `cache` as the built cache of the declared `layer`."""
        self.register(
            layer.name,
            cache,
            policy=layer.policy,
            invalidatable=layer.invalidatable,
            description=layer.description,
            key_help=layer.key.help,
            parse_key=layer.key.parse,
            ops=layer.bound_ops(),
            reload=layer.reload,
        )
        self._entries[layer.name].layer = layer
        return cache

    def reset(self) -> None:
        """Forget every entry (the builder refills it)."""
        self._entries.clear()

    def unregister(self, name: str) -> None:
        """Forget the cache registered under `name` (tests)."""
        self.entry(name)
        del self._entries[name]

    def names(self) -> list[str]:
        """Return every registered name, in registration order."""
        return list(self._entries)

    def entry(self, name: str) -> RegisteredCache:
        """Return the registry entry for `name`."""
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownCacheError(name, self.names()) from None

    def entries(self) -> list[RegisteredCache]:
        """Return every registry entry, in registration order."""
        return list(self._entries.values())

    def get(self, name: str) -> ManagedCache:
        """Return the cache registered under `name`."""
        return self.entry(name).cache

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def sizes(self) -> dict[str, int]:
        """Return each cache's live entry count."""
        return {name: len(entry.cache) for name, entry in self._entries.items()}

    def stats(self) -> dict[str, dict[str, Any]]:
        """Return each cache's stats plus its policy, description and flags."""
        return {name: self._entry_stats(entry) for name, entry in self._entries.items()}

    @staticmethod
    def _entry_stats(entry: RegisteredCache) -> dict[str, Any]:
        return {
            **entry.cache.stats(),
            "policy": str(entry.policy),
            "description": entry.description,
            "invalidatable": entry.invalidatable,
        }

    def parse_key(self, name: str, text: str) -> Hashable:
        """Turn an operator-typed key into `name`'s cache key, or raise ValueError."""
        entry = self.entry(name)
        try:
            return entry.parse_key(text)
        except ValueError as exc:
            hint = f" (expected: {entry.key_help})" if entry.key_help else ""
            raise ValueError(f"bad key for cache {name!r}: {exc}{hint}") from exc

    def clear(self, name: str) -> int:
        """Clear the cache `name`; return how many entries were removed."""
        return self.get(name).clear()

    def invalidate(self, name: str, key: Hashable) -> int:
        """Invalidate one key of cache `name`; return how many entries were removed."""
        return self.get(name).invalidate(key)

    def apply(self, name: str, op: str, *args: Any) -> int:
        """Run the named invalidation operation `op` of cache `name`."""
        entry = self.entry(name)
        if op == "key":
            return entry.cache.invalidate(*args)
        if op == "all":
            return entry.cache.clear(*args)
        try:
            fn = entry.ops[op]
        except KeyError:
            raise UnknownOperationError(name, op, entry.op_names()) from None
        return fn(*args)

    def clear_invalidatable(self) -> dict[str, int]:
        """Clear every invalidatable cache (a bus gap); return removed counts."""
        return {
            name: entry.cache.clear()
            for name, entry in self._entries.items()
            if entry.invalidatable
        }

    def clear_all(self) -> dict[str, int]:
        """Clear every registered cache, invalidatable or not (tests)."""
        return {name: entry.cache.clear() for name, entry in self._entries.items()}

    def set_clock(self, clock: Clock) -> None:
        """Make every registered cache read time from `clock`."""
        for entry in self._entries.values():
            entry.cache.set_clock(clock)


#: The process-wide registry, filled by `caches.layers.build_registry()`.
registry = CacheRegistry()
