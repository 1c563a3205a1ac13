"""Store-order queues that give every cache entry its deadline and its age.

A `BoundedTTLCache` keeps values in a plain dict and the bookkeeping here:
one FIFO queue per distinct ttl, each slot holding (key, stored_at).
Because a queue's slots share one ttl and the clock never goes back, each
queue is sorted by deadline, so every expired entry sits in a prefix of its
queue and the oldest entry is at the front of one of them. That makes expiry
and eviction amortised O(1) and costs 16 bytes per entry (a list slot and a C
double), far less than a per-entry `(value, expires_at)` tuple and float.

Lazy deletion. Slots are never searched for: re-setting or removing a key
leaves its old slot queued as *stale*, and the queue counts stale slots per
key (`stale`, a plain int per key, no object). A key's live slot is always
its newest one, and a queue pops in store order, so the first `stale[key]`
slots of a key that a queue meets (popping at the front, or compacting) are
exactly its stale ones: the count alone tells a stale slot from the live
one, without positions.

Compaction. Stale slots that sit behind live ones are reclaimed by an
incremental pass (`ExpiringStore._compact_step`): it walks the queue from
the front in bounded chunks, dropping stale slots and sliding live ones down
in order, so no single write pays for the whole queue. The pass covers the
slots queued when it started; newer slots wait for the next pass.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Hashable

# Popped slots are trimmed away once they are at least this many and at
# least half of the list, which keeps pops O(1) amortised.
COMPACT_AFTER = 1024


class SlotQueue:
    """A FIFO of (key, stored_at) slots for entries that share one ttl."""

    __slots__ = (
        "ttl",
        "keys",
        "times",
        "head",
        "base",
        "stale",
        "stale_slots",
        "scan",
        "scan_end",
        "limit",
    )

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.keys: list[Hashable | None] = []
        self.times = array("d")
        self.head = 0
        # Slots trimmed off the front so far: `base + i` is the absolute
        # position of index i, which a compaction pass's cursor is kept in.
        self.base = 0
        # Stale slots still queued, per key, and their total.
        self.stale: dict[Hashable, int] = {}
        self.stale_slots = 0
        # A compaction pass in progress: the absolute position it has reached
        # and the one it stops at (-1: no pass).
        self.scan = -1
        self.scan_end = -1
        # Stale slots past which a write looks at compaction again: the live
        # slots plus the slack when last looked (0: not looked yet), or -1
        # while a pass runs, so that every write leaving a stale slot
        # advances it. One compare on the write path instead of a recount.
        self.limit = 0

    def __len__(self) -> int:
        return len(self.keys) - self.head

    def live_slots(self) -> int:
        """Return how many queued slots hold a live entry."""
        return len(self.keys) - self.head - self.stale_slots

    def front_time(self) -> float:
        """Return when the front slot was stored, or +inf when empty."""
        return self.times[self.head] if self.head < len(self.keys) else math.inf

    def front_deadline(self) -> float:
        """Return the deadline of the front slot, or +inf when empty."""
        return self.front_time() + self.ttl

    def pop_key(self) -> Hashable | None:
        """Remove the front slot; return its key (the caller tells live from stale)."""
        head = self.head
        keys = self.keys
        key = keys[head]
        keys[head] = None  # release the key now, not at the next trim
        head += 1
        if head >= COMPACT_AFTER and head * 2 >= len(keys):
            del keys[:head]
            del self.times[:head]
            self.base += head
            head = 0
        self.head = head
        return key

    def mark_stale(self, key: Hashable) -> None:
        """Count one more stale slot of `key` (its live slot was in this queue)."""
        stale = self.stale
        stale[key] = stale.get(key, 0) + 1
        self.stale_slots += 1

    def rebase(self, offset: float) -> None:
        """Shift every stored time by `offset` (the cache changed clocks)."""
        self.times = array("d", (t + offset for t in self.times))
