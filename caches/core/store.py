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

Grouping scopes. A scope declared `Within("channel", parent=fn)` groups the
values of scope "channel" by `fn(value)` (channels by their server) instead
of indexing keys: its index holds each group's channel values, so a server
drop pops the server's channels and their keys and leaves every other index
entry of those keys alone (they are all in the popped channels): per key it
costs the dict delete and one stale count, no scope function call. Several
scopes can be grouped at once (`Within("user", "channel", parent=fn)`); the
contract is that all of one key's values in those scopes share one parent
(a key belongs to one server), which `set` checks.

Like the cache built on it, the store is confined to the event-loop thread
(see `caches.core.bounded`).
"""

from __future__ import annotations

import builtins
import math
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
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


class Within:
    """A scope that groups the values of other scopes by `parent` (see the module)."""

    __slots__ = ("scopes", "parent")

    def __init__(self, *scopes: str, parent: Callable[[Any], Hashable]) -> None:
        if not scopes:
            raise ValueError("Within needs at least one scope to group")
        self.scopes = scopes
        self.parent = parent

    def __repr__(self) -> str:
        return f"Within({', '.join(map(repr, self.scopes))})"


#: What a store's `scopes` mapping holds: a key's scope function, or a grouping.
ScopeSpec = ScopeFn | Within
#: One grouping's part over one grouped scope: (the grouped scope's position,
#: the parent function, the grouping's index of {parent: that scope's values}).
_Part = tuple[int, Callable[[Any], Hashable], ScopeIndex]
#: Run an iterator to its end, keeping nothing (a loop in C).
_drain: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


def _each(found: Any) -> Any:
    """Return an index value's keys as an iterable (no copy of a set)."""
    if found is _NO_KEYS:
        return ()
    return found if found.__class__ is builtins.set else (found,)


def _count(found: Any) -> int:
    """Return how many keys an index value holds (0 for _NO_KEYS)."""
    if found is _NO_KEYS:
        return 0
    return len(found) if found.__class__ is builtins.set else 1


def _members(found: Any) -> builtins.set[Any]:
    """Return an index value as a set of keys (a copy; empty for _NO_KEYS)."""
    if found is _NO_KEYS:
        return builtins.set()
    return builtins.set(found) if found.__class__ is builtins.set else {found}


def _index_put(index: ScopeIndex, value: Hashable, key: Any) -> bool:
    """Add `key` to `value`'s keys; say whether `value` is new to the index."""
    found = index.get(value, _NO_KEYS)
    if found is _NO_KEYS:
        index[value] = key
        return True
    if found.__class__ is builtins.set:
        found.add(key)
    elif found != key:
        index[value] = {found, key}
    return False


def _index_drop(index: ScopeIndex, value: Hashable, key: Any) -> bool:
    """Remove `key` from `value`'s keys; say whether `value` left the index."""
    found = index.get(value, _NO_KEYS)
    if found.__class__ is builtins.set:
        found.discard(key)
        if len(found) <= 1:
            # Back to a lone key (a set never shrinks its table).
            if found:
                index[value] = next(iter(found))
            else:
                del index[value]
                return True
    elif found is not _NO_KEYS and found == key:
        del index[value]
        return True
    return False


def _union(
    index: ScopeIndex, values: Any, into: builtins.set[Any], *, pop: bool = False
) -> None:
    """Add the keys of every one of `values` in `index` to `into` (`pop`: and remove them)."""
    take = index.pop if pop else index.get
    for value in values:
        found = take(value, _NO_KEYS)
        if found.__class__ is builtins.set:
            into |= found
        elif found is not _NO_KEYS:
            into.add(found)


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
        scopes: Mapping[str, ScopeSpec] | None = None,
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
        specs = dict(scopes or {})
        self._scope_names = tuple(specs)
        # The key-indexed scopes (in order) and the groupings of their values.
        self._scope_fns: dict[str, ScopeFn] = {
            n: fn for n, fn in specs.items() if not isinstance(fn, Within)
        }
        self._groupings = {n: g for n, g in specs.items() if isinstance(g, Within)}
        for n, grouping in self._groupings.items():
            for grouped in grouping.scopes:
                if grouped not in self._scope_fns:
                    raise ValueError(
                        f"cache {name!r}: scope {n!r} groups {grouped!r}, which is "
                        f"not a scope of keys; those are {list(self._scope_fns)}"
                    )
            if len(set(grouping.scopes)) != len(grouping.scopes):
                raise ValueError(f"cache {name!r}: scope {n!r} names a scope twice")
        # Per key scope: (its function, its index, the groupings of its values
        # as (parent, grouping index) pairs).
        self._scopes: tuple[
            tuple[
                ScopeFn,
                ScopeIndex,
                tuple[tuple[Callable[[Any], Hashable], ScopeIndex], ...],
            ],
            ...,
        ] = ()
        self._groups: dict[str, tuple[_Part, ...]] = {}
        # Set once any key has had two values in one scope (see _remove_scope).
        self._multi_valued = False
        # The scope functions that have given some key no value (see scope_is_total).
        self._sparse: builtins.set[ScopeFn] = builtins.set()
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
        parts = self._groups.get(scope)
        if parts is not None:
            return list(self._grouped_keys(parts, value))
        found = self._scopes[self._position(scope)][1].get(value, _NO_KEYS)
        return list(_each(found))

    def scope_size(self, scope: str, value: Hashable) -> int:
        """Return how many keys key scope `scope` holds under `value` (O(1), no expiry)."""
        return _count(self._scopes[self._position(scope)][1].get(value, _NO_KEYS))

    def scope_is_total(self, scope: str) -> bool:
        """Tell whether every key stored so far has had a value in key scope `scope`."""
        return self._scopes[self._position(scope)][0] not in self._sparse

    def grouped_size(self, grouping: str, parent: Hashable, scope: str) -> int:
        """Return how many keys the `scope` values grouped under `parent` hold, each once."""
        values = self.grouped_values(grouping, parent, scope)
        index = self._scopes[self._position(scope)][1]
        if self._multi_valued:  # a key may be under two of the values: count it once
            keys: builtins.set[Any] = builtins.set()
            _union(index, values, keys)
            return len(keys)
        return sum(_count(index.get(value, _NO_KEYS)) for value in values)

    def grouped_values(
        self, grouping: str, parent: Hashable, scope: str, limit: int | None = None
    ) -> list[Any]:
        """Return the values of key scope `scope` that grouping `grouping` files under `parent`.

        `limit`: at most that many of them (in no promised order).
        """
        for position, _parent, up in self._groups[grouping]:
            if position == self._position(scope):
                return list(islice(_each(up.get(parent, _NO_KEYS)), limit))
        raise KeyError(
            f"cache {self.name!r}: scope {grouping!r} does not group {scope!r}"
        )

    def maps(self) -> dict[str, ExpiringStore[K, V]]:
        """Return the core maps behind this cache by label: itself, as "primary"."""
        return {"primary": self}

    @property
    def scope_names(self) -> tuple[str, ...]:
        """Return the names of this store's scopes (groupings included)."""
        return self._scope_names

    def scope_members(self, scope: str) -> dict[Hashable, builtins.set[K]]:
        """Return a copy of one scope as {value: its keys} (for checks)."""
        parts = self._groups.get(scope)
        if parts is not None:
            parents = {p for _pos, _fn, up in parts for p in up}
            return {p: self._grouped_keys(parts, p) for p in parents}
        index = self._scopes[self._position(scope)][1]
        return {v: _members(found) for v, found in index.items()}

    def scope_values(self, scope: str) -> ScopeFn:
        """Return the function giving a key's values in `scope` (groupings too)."""
        parts = self._groups.get(scope)
        if parts is None:
            return self._scopes[self._position(scope)][0]
        fns = [(self._scopes[pos][0], parent) for pos, parent, _up in parts]
        return lambda key: tuple({parent(v) for fn, parent in fns for v in fn(key)})

    def _position(self, scope: str) -> int:
        """Return the position of key scope `scope` in `_scopes`."""
        for position, name in enumerate(self._scope_fns):
            if name == scope:
                return position
        raise KeyError(
            f"cache {self.name!r} has no scope {scope!r}; it has {list(self._scope_names)}"
        )

    def _grouped_keys(
        self, parts: tuple[_Part, ...], parent: Hashable
    ) -> builtins.set[K]:
        keys: builtins.set[K] = builtins.set()
        for pos, _parent, up in parts:
            _union(self._scopes[pos][1], _each(up.get(parent, _NO_KEYS)), keys)
        return keys

    def _index_add(self, key: K) -> None:
        for fn, index, ups in self._scopes:
            values = fn(key)
            if len(values) != 1:
                if values:
                    # A scoped removal must then unindex the key's other values.
                    self._multi_valued = True
                else:
                    self._sparse.add(fn)  # see scope_is_total
            for value in values:
                found = index.get(value, _NO_KEYS)
                if found is _NO_KEYS:
                    index[value] = key
                    for parent, up in ups:  # a new value joins its groups
                        _index_put(up, parent(value), value)
                elif found.__class__ is builtins.set:
                    found.add(key)
                elif found != key:
                    index[value] = {found, key}

    def _check_groupings(self, key: K) -> None:
        """Refuse a key whose values in one grouping's scopes have two parents."""
        for name, parts in self._groups.items():
            parents = {
                parent(v)
                for pos, parent, _up in parts
                for v in self._scopes[pos][0](key)
            }
            if len(parents) > 1:
                raise ValueError(
                    f"cache {self.name!r}: key {key!r} belongs to {sorted(map(repr, parents))} "
                    f"in scope {name!r}; a key's values in a grouping must share one parent"
                )

    def _index_remove(self, key: K) -> None:
        for fn, index, ups in self._scopes:
            for value in fn(key):
                if _index_drop(index, value, key):
                    for parent, up in ups:  # the value's last key: it leaves its groups
                        _index_drop(up, parent(value), value)

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
        if self._groups:  # before anything changes: a refused key is stored nowhere
            self._check_groupings(key)
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
        if self._scopes:
            self._index_add(key)
        queue.keys.append(key)
        queue.times.append(now)
        data[key] = value
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

    def rekey(self, key: K, new_key: K, ttl: float | None = None) -> bool:
        """Move `key`'s live value to `new_key` (a fresh deadline); False if none.

        Nothing is moved when `key` holds nothing (it expired, or was dropped
        since it was stored), so a value that an invalidation removed is
        never brought back under another key.
        """
        value = self.peek(key)
        if value is MISSING:
            return False
        self._remove(key)
        self.set(new_key, value, ttl)
        return True

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
        parts = self._groups.get(scope)
        # The values popped whole from each key scope, by position; with a
        # grouping, every value those keys have in the grouped scopes.
        drained: dict[int, Any] = {}
        if parts is None:
            position = self._position(scope)
            _fn, index, ups = self._scopes[position]
            found = index.pop(value, _NO_KEYS)
            if found is _NO_KEYS:
                return builtins.set()
            keys: builtins.set[K] = (
                found if found.__class__ is builtins.set else {found}
            )
            for parent, up in ups:
                _index_drop(up, parent(value), value)
            drained[position] = (value,)
        else:
            keys = builtins.set()
            for position, _parent, up in parts:
                members = up.pop(value, _NO_KEYS)
                if members is not _NO_KEYS:
                    drained[position] = values = _members(members)
                    self._pop_values(position, values, keys, up)
            if not keys:
                return keys
        self._drop_keys(keys, drained, whole=parts is not None)
        return keys

    def _remove_scope_values(
        self, scope: str, values: Iterable[Hashable]
    ) -> builtins.set[K]:
        """Remove every key of several values of key scope `scope`; return them."""
        position = self._position(scope)
        popped = builtins.set(values)
        keys: builtins.set[K] = builtins.set()
        self._pop_values(position, popped, keys, None)
        if keys:
            self._drop_keys(keys, {position: popped}, whole=False)
        return keys

    def _drop_keys(
        self, keys: builtins.set[K], drained: dict[int, Any], *, whole: bool
    ) -> None:
        """Drop `keys`, whose `drained` values left their indexes already (see _remove_scope)."""
        _drain(map(self._data.__delitem__, keys))  # the deletes, looped in C
        self._unindex_others(keys, drained, whole=whole)
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

    def _pop_values(
        self,
        position: int,
        values: Any,
        into: builtins.set[K],
        popped_from: ScopeIndex | None,
    ) -> None:
        """Pop `values` (and their keys, into `into`) from one key scope's index."""
        _union(self._scopes[position][1], values, into, pop=True)
        for parent, up in self._scopes[position][2]:
            if up is not popped_from:  # the values leave the scope's other groupings
                for v in values:
                    _index_drop(up, parent(v), v)

    def _unindex_others(
        self, keys: builtins.set[K], drained: dict[int, Any], *, whole: bool
    ) -> None:
        # Every index entry of `keys` but the values the caller popped
        # (`drained`; `whole`: all their values in those scopes).
        # Grouped by scope value: each value's set is updated once, by the
        # keys it loses (one C-level difference), not by one discard call per
        # key; a value left with no key leaves the index and its groupings.
        for position, (fn, other, ups) in enumerate(self._scopes):
            popped = drained.get(position)
            if popped is not None and (whole or not self._multi_valued):
                continue
            # Each value's dropped keys, so its set loses just those: a
            # difference with all of `keys` would walk them once per value.
            groups: dict[Hashable, list[K]] = {}
            for key in keys:
                for v in fn(key):
                    group = groups.get(v)
                    if group is None:
                        groups[v] = [key]
                    else:
                        group.append(key)
            for v, dropped in groups.items():
                if popped is not None and v in popped:
                    continue
                found = other.get(v, _NO_KEYS)
                if found.__class__ is builtins.set:
                    found.difference_update(dropped)
                    if len(found) > 1:
                        continue
                    if found:
                        other[v] = next(iter(found))  # back to a lone key
                        continue
                elif found is _NO_KEYS or found not in keys:
                    continue
                del other[v]
                for parent, up in ups:  # v has no key left: it leaves its groups
                    _index_drop(up, parent(v), v)

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
        ups: list[list[tuple[Callable[[Any], Hashable], ScopeIndex]]] = [
            [] for _ in self._scope_fns
        ]
        self._groups = {}
        for name, grouping in self._groupings.items():
            parts: list[_Part] = []
            for grouped in grouping.scopes:
                position, up = self._position(grouped), cast(ScopeIndex, {})
                ups[position].append((grouping.parent, up))
                parts.append((position, grouping.parent, up))
            self._groups[name] = tuple(parts)
        self._scopes = tuple(
            (fn, {}, tuple(groupings))
            for fn, groupings in zip(self._scope_fns.values(), ups, strict=True)
        )

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
