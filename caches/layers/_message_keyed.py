"""A message-id keyed TTL cache that tells "expired" from "never seen".

Shared by the voice transcript and markdown table layers: each is a
`MessageKeyedLayer` (keyed alike by `MESSAGE_KEY`). Values live in a
`BoundedTTLCache`; beside it, a ring of the last `seen_cap` message ids ever
stored (an int in a deque and a set: roughly 70-100 bytes each, values are
not kept) answers whether a missing id was once there. So the "Show Markdown"
button can say "expired" rather than "not found", without holding text past
its ttl. The ring survives a cache clear: it is what makes the clear's
answer honest, and it is bounded by its cap.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from caches.core import MISSING, BoundedTTLCache, Clock
from caches.layers._feeds import NotFed
from caches.layers._maps import LayerMaps
from caches.layers._support import parse_int
from caches.layers.declaration import KeyShape, Layer, LayerSettings
from caches.registry import EmergencyPolicy

V = TypeVar("V")


class LookupStatus(enum.Enum):
    """What a message-keyed lookup found."""

    FOUND = "found"
    EXPIRED = "expired"  # stored once, gone now (ttl, cap or a clear)
    MISSING = "missing"  # never stored here (or too long ago to remember)


@dataclass(frozen=True, slots=True)
class Lookup(Generic[V]):
    """A lookup's status and, when found, its value."""

    status: LookupStatus
    value: V | None = None

    @property
    def found(self) -> bool:
        """Tell whether the value is here."""
        return self.status is LookupStatus.FOUND


class SeenIds:
    """The last `maxlen` distinct ids added, oldest forgotten first."""

    __slots__ = ("_order", "_members", "maxlen")

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self._order: deque[int] = deque()
        self._members: set[int] = set()

    def add(self, item: int) -> None:
        """Remember `item` (already remembered: keeps its place)."""
        if item in self._members:
            return
        if len(self._order) >= self.maxlen:
            self._members.discard(self._order.popleft())
        self._order.append(item)
        self._members.add(item)

    def __contains__(self, item: object) -> bool:
        return item in self._members

    def __len__(self) -> int:
        return len(self._order)


class MessageKeyedCache(Generic[V]):
    """Message id -> value with a ttl, plus tombstones for expired ids."""

    def __init__(
        self,
        name: str,
        *,
        maxsize: int,
        ttl: float,
        seen_factor: int = 2,
    ) -> None:
        self.cache: BoundedTTLCache[int, V] = BoundedTTLCache(
            name, maxsize=maxsize, ttl=ttl
        )
        self.seen = SeenIds(maxsize * seen_factor)

    def put(self, message_id: int, value: V) -> None:
        """Store `value` for `message_id` for the cache's ttl."""
        self.cache.set(message_id, value)
        self.seen.add(message_id)

    def lookup(self, message_id: int) -> Lookup[V]:
        """Return FOUND with the value, EXPIRED, or MISSING."""
        value = self.cache.get(message_id)
        if value is not MISSING:
            return Lookup(LookupStatus.FOUND, value)
        if message_id in self.seen:
            return Lookup(LookupStatus.EXPIRED)
        return Lookup(LookupStatus.MISSING)

    # ManagedCache: what the registry calls.

    def __len__(self) -> int:
        return len(self.cache)

    def clear(self) -> int:
        """Drop every value (tombstones stay, so lookups answer EXPIRED)."""
        return self.cache.clear()

    def invalidate(self, key: Any) -> int:
        """Drop one value."""
        return self.cache.invalidate(key)

    def clear_expired(self) -> int:
        """Drop every expired value now."""
        return self.cache.clear_expired()

    def set_clock(self, clock: Clock) -> None:
        """Read ttl time from `clock`."""
        self.cache.set_clock(clock)

    def maps(self) -> dict[str, BoundedTTLCache[int, V]]:
        """Return the value map (the tombstones are a ring of ids, not a map)."""
        return {"primary": self.cache}

    def stats(self) -> dict[str, Any]:
        """Return the value cache's stats plus the tombstone ring's size."""
        return {**self.cache.stats(), "tombstones": len(self.seen)}


def parse_snowflake(text: str) -> int:
    """Turn an operator-typed Discord id into a key, or raise ValueError."""
    return parse_int(text)


#: The key of every message-keyed layer.
MESSAGE_KEY = KeyShape(help="a Discord message id", parse=parse_snowflake)


class MessageKeyedLayer(LayerMaps, Generic[V]):
    """A message-keyed layer: its cache, reads and drops, and its declaration (`layer`).

    Such layers are cleared in an emergency and not invalidatable: what a
    sent message carried never changes, so a bus gap cannot make it stale;
    no table feeds them (the turn writes them).
    """

    __slots__ = ("cap_setting", "ttl_setting", "layer", "cache")
    cache: MessageKeyedCache[V]

    def __init__(
        self,
        name: str,
        *,
        cap_setting: str,
        ttl_setting: str,
        description: str,
    ) -> None:
        super().__init__(name)
        self.cap_setting, self.ttl_setting = cap_setting, ttl_setting
        self.layer = Layer(
            name=name,
            description=description,
            policy=EmergencyPolicy.CLEAR,
            invalidatable=False,
            key=MESSAGE_KEY,
            not_fed=NotFed.TURN_WRITTEN,
            build=self.build,
            settings=(cap_setting, ttl_setting),
        )

    def make(self, config: LayerSettings) -> MessageKeyedCache[V]:
        """Make the cache from the cap and ttl (minutes) settings."""
        self.cache = MessageKeyedCache(
            self.name,
            maxsize=config.cap(self.cap_setting),
            ttl=config.minutes(self.ttl_setting),
        )
        return self.cache

    def built(self) -> MessageKeyedCache[V]:
        """Return this process's cache (tests, metrics)."""
        return self.cache

    def put(self, message_id: int, value: V) -> None:
        """Remember `value` for the message."""
        self.cache.put(message_id, value)

    def lookup(self, message_id: int) -> Lookup[V]:
        """Return the message's value: found, expired or missing."""
        return self.cache.lookup(message_id)

    def invalidate(self, message_id: int) -> int:
        """Forget one message's value (the message was deleted)."""
        return self.cache.invalidate(message_id)
