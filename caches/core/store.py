"""ExpiringStore: the bounded, expiring storage under every BoundedTTLCache.

Layout. Values live in one plain dict (`_data`), so a hit is a clock call, a
compare and one `dict.get`. Deadlines and store order live beside it in
`SlotQueue`s (one per distinct ttl, see `caches.core.slots`), sorted by
deadline, so `_front_deadline` (the earliest deadline of any entry) tells in
one compare whether anything has expired at all.

Expiry. Once the clock passes `_front_deadline`, the next read or write drops
every expired entry (popping queue fronts, O(1) amortised per entry) before
it answers. So an expired entry is a miss and counts as an expiration, and a
key written once and never read is freed at the next read or write after its
deadline. That is stricter than the spec's sweep on the write path "at most
once every 10 minutes", so there is no sweep interval to set and no periodic
full scan.

Bound. A new key at the cap first drops expired entries, then evicts the
oldest-stored entry. Re-setting an existing key never evicts; it refreshes
both its deadline and its position (it becomes the newest), like a new store.
Entries stored at the very same clock reading with different ttls have no
defined order between them (only a fake clock ever produces such ties; with
one ttl, order is exact).

Per-entry ttl. `set(key, value, ttl=...)` puts the slot in that ttl's queue.
Up to 32 distinct ttls are kept exactly; a 33rd expires at the nearest
shorter kept ttl (never later than asked).

Clock. Any non-decreasing float clock (default `time.monotonic`). Swapping
clocks (`set_clock` or assigning `cache.clock`) carries every entry's
remaining lifetime over to the new clock.

Scopes. A store built with `scopes={"server": fn, ...}` keeps a secondary
index per scope: `fn(key)` returns the scope values a key belongs to (a
tuple, empty for none), and `keys_in_scope("server", 42)` returns the live
keys of scope value 42 without a scan. The index is maintained wherever an
entry is added or removed (set, eviction, expiry, invalidation, clear), so
a scoped invalidation costs O(entries it drops). Its cost is on the write
path only (one call of each scope function per new key and per removal)
and, in memory, one set slot per key and scope plus one set per distinct
scope value; stores without scopes pay one truth test per write.

Like the cache built on it, the store is confined to the event-loop thread
(see `caches.core.bounded`).
"""

from __future__ import annotations

import builtins
import math
import time
from collections.abc import Callable, Hashable, Mapping
from itertools import islice
from typing import Any, Generic, TypeVar, cast, overload

from caches.core.clock import Clock
from caches.core.markers import MISSING, Missing
from caches.core.slots import COMPACT_AFTER as _COMPACT_AFTER
from caches.core.slots import SlotQueue

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")

# Distinct per-entry ttls kept exactly; see the module docstring.
MAX_TTL_QUEUES = 32
# Stale slots a queue tolerates beyond its live ones before a compaction pass.
_STALE_SLACK = 1024
# Slots a compaction pass walks per write that leaves a stale slot (at least).
_COMPACT_CHUNK = 256

#: A scope function: the scope values a key belongs to (empty: none).
ScopeFn = Callable[[Any], tuple[Hashable, ...]]

#: A scope index: each scope value's keys, a lone key held as itself.
#: Most scope values (a user, a channel) have one key, and an empty set
#: takes 216 bytes; a key is never a `set` (unhashable), so the two cannot
#: be confused.
ScopeIndex = dict[Hashable, Any]
_NO_KEYS: Any = object()


def _members(found: Any) -> builtins.set[Any]:
    """Return an index value as a set of keys (a copy; empty for _NO_KEYS)."""
    if found is _NO_KEYS:
        return builtins.set()
    return builtins.set(found) if found.__class__ is builtins.set else {found}


def _index_drop(index: ScopeIndex, value: Hashable, key: Any) -> None:
    """Remove `key` from `value`'s keys, dropping the value once it has none."""
    found = index.get(value, _NO_KEYS)
    if found.__class__ is builtins.set:
        found.discard(key)
        if len(found) <= 1:
            # Back to a lone key (a set never shrinks its table).
            if found:
                index[value] = next(iter(found))
            else:
                del index[value]
    elif found is not _NO_KEYS and found == key:
        del index[value]


class ExpiringStore(Generic[K, V]):
    """Values in a dict, deadlines and store order in per-ttl slot queues."""

    # Set by _reset_structure (and reset on clear):
    _q0: SlotQueue  # the queue of the store's own ttl
    _queues: dict[float, SlotQueue]  # every ttl queue, _q0 included
    _home: dict[K, SlotQueue]  # the queue of each live key not in _q0
    _stale_slots: int  # stale slots in every queue
    _front_deadline: float  # no entry expires before this

    def __init__(
        self,
        name: str,
        *,
        maxsize: int,
        ttl: float | None = None,
        clock: Clock = time.monotonic,
        scopes: Mapping[str, ScopeFn] | None = None,
    ) -> None:
        if maxsize < 1:
            raise ValueError(f"cache {name!r}: maxsize must be >= 1, got {maxsize}")
        if ttl is not None and not ttl > 0:
            raise ValueError(f"cache {name!r}: ttl must be > 0 or None, got {ttl}")
        self.name = name
        self.maxsize = maxsize
        self.ttl = None if ttl is None else float(ttl)
        self._now: Clock = clock
        self._data: dict[K, V] = {}
        self.evictions = 0
        self.expirations = 0
        self._scope_fns: dict[str, ScopeFn] = dict(scopes or {})
        self._scopes: tuple[tuple[ScopeFn, ScopeIndex], ...] = ()
        # Set once any key has had two values in one scope (see _remove_scope).
        self._multi_valued = False
        self._reset_structure()

    # ----------------------------------------------------------- clock

    @property
    def clock(self) -> Clock:
        """Return the clock this cache reads deadlines from."""
        return self._now

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.set_clock(clock)

    def set_clock(self, clock: Clock) -> None:
        """Read time from `clock`, keeping each entry's remaining lifetime."""
        offset = clock() - self._now()
        for queue in self._queues.values():
            queue.rebase(offset)
        self._front_deadline += offset
        self._now = clock

    # ----------------------------------------------------------- reads

    @overload
    def peek(self, key: K) -> V | Missing: ...

    @overload
    def peek(self, key: K, default: D) -> V | D: ...

    def peek(self, key: K, default: Any = MISSING) -> Any:
        """Return the live value for `key` without counting a hit or miss."""
        now = self._now()  # _expire_due, inlined (a hot path)
        if now >= self._front_deadline:
            self._expire(now)
        return self._data.get(key, default)

    def __contains__(self, key: object) -> bool:
        self._expire_due()
        return key in self._data

    def __len__(self) -> int:
        self._expire_due()
        return len(self._data)

    def keys(self) -> list[K]:
        """Return a snapshot of the live keys, in no promised order."""
        self._expire_due()
        return list(self._data)

    def items(self) -> list[tuple[K, V]]:
        """Return a snapshot of the live (key, value) pairs."""
        self._expire_due()
        return list(self._data.items())

    def sample_items(self, limit: int) -> list[tuple[K, V]]:
        """Return up to `limit` stored (key, value) pairs, expired ones included.

        No side effects (nothing expires, nothing is counted), for size
        estimates; it iterates the map, so call it on the cache's own thread.
        """
        return list(islice(self._data.items(), max(limit, 0)))

    def keys_in_scope(self, scope: str, value: Hashable) -> list[K]:
        """Return the live keys whose scope `scope` includes `value` (no scan)."""
        self._expire_due()
        found = self._scope_index(scope).get(value, _NO_KEYS)
        if found is _NO_KEYS:
            return []
        return list(found) if found.__class__ is builtins.set else [found]

    def maps(self) -> dict[str, ExpiringStore[K, V]]:
        """Return the core maps behind this cache by label: itself, as "primary"."""
        return {"primary": self}

    @property
    def scope_names(self) -> tuple[str, ...]:
        """Return the names of this store's scope indexes."""
        return tuple(self._scope_fns)

    def scope_members(self, scope: str) -> dict[Hashable, builtins.set[K]]:
        """Return a copy of one scope index as {value: its keys} (for checks)."""
        return {v: _members(found) for v, found in self._scope_index(scope).items()}

    def _scope_index(self, scope: str) -> ScopeIndex:
        names = list(self._scope_fns)
        if scope not in self._scope_fns:
            raise KeyError(
                f"cache {self.name!r} has no scope {scope!r}; it has {names}"
            )
        return self._scopes[names.index(scope)][1]

    def _index_add(self, key: K) -> None:
        for fn, index in self._scopes:
            values = fn(key)
            if len(values) > 1:
                # A scoped removal must then unindex the key's other values.
                self._multi_valued = True
            for value in values:
                found = index.get(value, _NO_KEYS)
                if found is _NO_KEYS:
                    index[value] = key
                elif found.__class__ is builtins.set:
                    found.add(key)
                elif found != key:
                    index[value] = {found, key}

    def _index_remove(self, key: K) -> None:
        for fn, index in self._scopes:
            for value in fn(key):
                _index_drop(index, value, key)

    # ----------------------------------------------------------- writes

    def set(self, key: K, value: V, ttl: float | None = None) -> None:
        """Store `value` under `key` for `ttl` seconds (None: the cache's ttl)."""
        now = self._now()
        if now >= self._front_deadline:
            self._expire(now)
        data = self._data
        if key in data:
            # A re-set (inlined: a hot path too). The old slot stays queued,
            # stale; the key's new slot goes to the back of its ttl's queue.
            q0 = self._q0
            if ttl is None or ttl == q0.ttl:
                queue = q0
            else:
                queue = self._queues.get(ttl) or self._queue_for(ttl)
            home = self._home
            old = home.get(key, q0) if home else q0
            stale = old.stale
            stale[key] = stale.get(key, 0) + 1
            old.stale_slots += 1
            self._stale_slots += 1
            queue.keys.append(key)
            queue.times.append(now)
            if queue is not old:
                if queue is q0:
                    del home[key]
                else:
                    home[key] = queue
            data[key] = value
            deadline = now + queue.ttl
            if deadline < self._front_deadline:
                self._front_deadline = deadline
            if old.stale_slots > old.limit:
                self._compact_progress(old, 1)
            return
        if len(data) >= self.maxsize:
            if self._stale_slots or len(self._queues) > 1:
                self._evict_one()
            else:
                # Inlined pop of the one queue's front: the hot path of a full
                # cache, where every slot is live (no stale slot exists).
                q0 = self._q0
                keys = q0.keys
                head = q0.head
                evicted = keys[head]
                del data[evicted]  # type: ignore[arg-type]
                if self._scopes:
                    self._index_remove(evicted)  # type: ignore[arg-type]
                keys[head] = None
                head += 1
                if head >= _COMPACT_AFTER and head * 2 >= len(keys):
                    del keys[:head]
                    del q0.times[:head]
                    q0.base += head
                    head = 0
                q0.head = head
                self.evictions += 1
        # Chosen after evicting: eviction may drop an empty ttl queue.
        if ttl is None:
            queue = self._q0
        else:
            queue = self._queue_for(ttl)
            if queue is not self._q0:
                self._home[key] = queue
        queue.keys.append(key)
        queue.times.append(now)
        data[key] = value
        if self._scopes:
            self._index_add(key)
        deadline = now + queue.ttl
        if deadline < self._front_deadline:
            self._front_deadline = deadline

    def _queue_for(self, ttl: float) -> SlotQueue:
        if not ttl > 0:
            raise ValueError(f"cache {self.name!r}: ttl must be > 0, got {ttl}")
        queue = self._queues.get(float(ttl))
        if queue is not None:
            return queue
        if len(self._queues) < MAX_TTL_QUEUES:
            queue = self._queues[float(ttl)] = SlotQueue(float(ttl))
            return queue
        shorter = [q for q in self._queues.values() if q.ttl < ttl]
        if shorter:
            return max(shorter, key=lambda q: q.ttl)
        return min(self._queues.values(), key=lambda q: q.ttl)

    # ----------------------------------------------------------- removal

    def clear_expired(self) -> int:
        """Drop every expired entry now; return how many were dropped."""
        now = self._now()
        return self._expire(now) if now >= self._front_deadline else 0

    def _remove(self, key: K) -> None:
        # The key's slot stays queued as stale until a pop or a compaction.
        del self._data[key]
        if self._scopes:
            self._index_remove(key)
        queue = self._home.pop(key, self._q0) if self._home else self._q0
        queue.mark_stale(key)
        self._stale_slots += 1
        if queue.stale_slots > queue.limit:
            self._compact_progress(queue, 1)

    def _remove_scope(self, scope: str, value: Hashable) -> builtins.set[K]:
        """Remove every key of one scope value; return them (no scan).

        Per key: the dict delete, its other scope values' index entries, and
        one stale count (batched in C); the slots are left for lazy deletion.
        """
        index = self._scope_index(scope)
        found = index.pop(value, _NO_KEYS)
        if found is _NO_KEYS:
            return builtins.set()
        keys: builtins.set[K] = found if found.__class__ is builtins.set else {found}
        data = self._data
        for key in keys:
            del data[key]
        self._unindex_others(keys, index, value)
        if self._home:
            touched: dict[SlotQueue, int] = {}
            for key in keys:
                queue = self._home.pop(key, self._q0)
                queue.mark_stale(key)
                touched[queue] = touched.get(queue, 0) + 1
        else:
            q0 = self._q0
            stale = q0.stale
            again = stale.keys() & keys if stale else ()
            # One more stale slot per key: a C-level merge for the keys that
            # had none (almost all), a loop for the few that had some.
            counts = {key: stale[key] + 1 for key in again}
            stale.update(dict.fromkeys(keys, 1))
            stale.update(counts)
            q0.stale_slots += len(keys)
            touched = {q0: len(keys)}
        self._stale_slots += len(keys)
        for queue, created in touched.items():
            if queue.stale_slots > queue.limit:
                self._compact_progress(queue, created)
        return keys

    def _unindex_others(
        self,
        keys: builtins.set[K],
        index: ScopeIndex,
        value: Hashable,
    ) -> None:
        # Every index entry of `keys` but (index, value), which the caller popped.
        for fn, other in self._scopes:
            same = other is index
            if same and not self._multi_valued:
                continue
            for key in keys:
                for v in fn(key):
                    if same and v == value:
                        continue
                    _index_drop(other, v, key)

    def _clear_entries(self) -> int:
        removed = len(self._data)
        self._data.clear()
        self._reset_structure()
        return removed

    # ----------------------------------------------------------- upkeep

    def _reset_structure(self) -> None:
        self._q0 = SlotQueue(math.inf if self.ttl is None else self.ttl)
        self._queues = {self._q0.ttl: self._q0}
        self._home = {}
        self._stale_slots = 0
        self._front_deadline = math.inf
        self._scopes = tuple((fn, {}) for fn in self._scope_fns.values())

    def _expire_due(self) -> None:
        now = self._now()
        if now >= self._front_deadline:
            self._expire(now)

    def _expire(self, now: float) -> int:
        removed = 0
        front = math.inf
        for queue in list(self._queues.values()):
            ttl = queue.ttl
            while queue.head < len(queue.keys) and queue.times[queue.head] + ttl <= now:
                removed += self._pop_front(queue)
            if queue:
                front = min(front, queue.front_deadline())
            elif queue is not self._q0:
                del self._queues[ttl]
        self._front_deadline = front
        self.expirations += removed
        return removed

    def _evict_one(self) -> None:
        while True:
            queue = self._q0 if len(self._queues) == 1 else self._oldest_queue()
            if self._pop_front(queue):
                self.evictions += 1
                return

    def _oldest_queue(self) -> SlotQueue:
        oldest = min(self._queues.values(), key=SlotQueue.front_time)
        for queue in list(self._queues.values()):
            if not queue and queue is not self._q0 and queue is not oldest:
                del self._queues[queue.ttl]
        return oldest

    def _pop_front(self, queue: SlotQueue) -> bool:
        """Pop `queue`'s front slot and drop its entry if live; say whether it was."""
        key = cast(K, queue.pop_key())
        stale = queue.stale
        if stale:
            count = stale.get(key)
            if count is not None:
                # One of the key's oldest slots in this queue: stale.
                if count == 1:
                    del stale[key]
                else:
                    stale[key] = count - 1
                queue.stale_slots -= 1
                self._stale_slots -= 1
                return False
        del self._data[key]
        if self._scopes:
            self._index_remove(key)
        if queue is not self._q0:
            self._home.pop(key, None)
        return True

    def _compact_progress(self, queue: SlotQueue, created: int) -> None:
        """Start or advance `queue`'s compaction pass (its stale slots passed its limit)."""
        if queue.scan < 0:
            # Start a pass once stale slots outnumber live ones (plus slack):
            # a queue then holds at most about twice its live slots.
            limit = queue.live_slots() + _STALE_SLACK
            if queue.stale_slots <= limit:
                queue.limit = limit
                return
            queue.scan = queue.base + queue.head
            queue.scan_end = queue.base + len(queue.keys)
            queue.limit = -1
        self._compact_step(queue, max(_COMPACT_CHUNK, 2 * created))
        if queue.scan < 0:
            queue.limit = queue.live_slots() + _STALE_SLACK

    def _compact_step(self, queue: SlotQueue, budget: int) -> None:
        """Walk up to `budget` slots of the pass: drop stale ones, slide live ones down."""
        keys, times, base = queue.keys, queue.times, queue.base
        start = max(queue.scan - base, queue.head)
        end = queue.scan_end - base
        if start >= end:  # pops from the front overtook the pass
            queue.scan = queue.scan_end = -1
            return
        stop = min(end, start + budget)
        stale = queue.stale
        write = start
        for read in range(start, stop):
            key = keys[read]
            count = stale.get(key)
            if count is None:  # live: keep it, in order
                if write != read:
                    keys[write] = key
                    times[write] = times[read]
                write += 1
            elif count == 1:  # one of the key's oldest slots here: stale
                del stale[key]
            else:
                stale[key] = count - 1
        dropped = stop - write
        if dropped:
            del keys[write:stop]
            del times[write:stop]
            queue.stale_slots -= dropped
            self._stale_slots -= dropped
            end -= dropped
        if write >= end:
            queue.scan = queue.scan_end = -1
        else:
            queue.scan = base + write
            queue.scan_end = base + end
