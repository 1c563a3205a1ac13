"""Store-order queues that give every cache entry its deadline and its age.

A `BoundedTTLCache` keeps values in a plain dict and the bookkeeping here:
one FIFO queue per distinct ttl, each slot holding (key, stored_at).
A slot is named by its queue's ttl and its position in that queue. Because a
queue's slots share one ttl and the clock never goes back, each queue is
sorted by deadline, so every expired entry sits in a prefix of its queue and
the oldest entry is at the front of one of them. That makes expiry and
eviction amortised O(1) and costs 16 bytes per entry (a list slot and a C
double), far less than a per-entry `(value, expires_at)` tuple and float.

Slots are never removed from the middle. Re-setting or invalidating a key
leaves its old slot behind as *stale*; `StaleRecord` counts those per key so
the pop that meets one skips it instead of dropping the live entry.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Hashable

# Popped slots are compacted away once they are at least this many and at
# least half of the list, which keeps pops O(1) amortised.
COMPACT_AFTER = 1024


class SlotQueue:
    """A FIFO of (key, stored_at) slots for entries that share one ttl."""

    __slots__ = ("ttl", "keys", "times", "head", "base")

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.keys: list[Hashable | None] = []
        self.times = array("d")
        self.head = 0
        # Slots compacted away so far: a slot's position `base + i` never
        # changes while it is queued, so it names the slot exactly (two
        # slots of one key may share a store time under a fake clock).
        self.base = 0

    def __len__(self) -> int:
        return len(self.keys) - self.head

    def push(self, key: Hashable, stored_at: float) -> int:
        """Append a slot at the back (the newest end); return its position."""
        self.keys.append(key)
        self.times.append(stored_at)
        return self.base + len(self.keys) - 1

    def front_time(self) -> float:
        """Return when the front slot was stored, or +inf when empty."""
        return self.times[self.head] if self.head < len(self.keys) else math.inf

    def front_deadline(self) -> float:
        """Return the deadline of the front slot, or +inf when empty."""
        return self.front_time() + self.ttl

    def pop(self) -> tuple[Hashable, int]:
        """Remove the front slot; return its key and position."""
        head = self.head
        keys = self.keys
        key = keys[head]
        position = self.base + head
        keys[head] = None  # release the key now, not at the next compaction
        head += 1
        if head >= COMPACT_AFTER and head * 2 >= len(keys):
            del keys[:head]
            del self.times[:head]
            self.base += head
            head = 0
        self.head = head
        return key, position

    def rebase(self, offset: float) -> None:
        """Shift every stored time by `offset` (the cache changed clocks)."""
        self.times = array("d", (t + offset for t in self.times))

    def filter(self, keep: list[bool]) -> None:
        """Keep only the queued slots flagged in `keep`, renumbering them."""
        queued = range(self.head, len(self.keys))
        kept = [i for i, flag in zip(queued, keep, strict=True) if flag]
        self.base += len(self.keys)  # fresh positions: no old one is reused
        self.keys = [self.keys[i] for i in kept]
        self.times = array("d", (self.times[i] for i in kept))
        self.head = 0

    def slots(self) -> list[tuple[Hashable, int]]:
        """Return the queued (key, position) slots, oldest first."""
        first = self.base + self.head
        return [(key, first + i) for i, key in enumerate(self.keys[self.head :])]


class StaleRecord:
    """Per-key bookkeeping for a key that has stale slots in some queue."""

    __slots__ = ("stale", "live_ttl", "live_position")

    def __init__(self) -> None:
        self.stale = 0
        # The key's live slot: (ttl of its queue, position in it), or
        # live_ttl None when the key holds no entry right now.
        self.live_ttl: float | None = None
        self.live_position = -1

    def is_live_slot(self, ttl: float, position: int) -> bool:
        """Tell whether the slot at (ttl, position) is this key's live slot."""
        return self.live_ttl == ttl and self.live_position == position
