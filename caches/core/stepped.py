"""Drop a large grouping value in bounded steps on the event loop (no long block).

Why. Deleting a key from a dict of 100,000 costs a few random memory reads
(its index slot, its entry, the key object): 0.2-0.4 us a key, measured
(benchmarks/scoped_invalidation.py). However good the index, a server
holding 1,000 keys then takes 0.3-0.4 ms to drop in one go, and nothing
else runs on the loop meanwhile.

How. `drop(parent)` answers at once with how many keys `parent` holds in
the grouping: it stales the parent's in-flight loads and marks the parent
`pending`. The loop then drops the parent's keys a few values of scope
`via` at a time (one user's spotlights, say), about `step` keys per loop
iteration, until none is left; a last sweep of the grouping drops any key
that had no `via` value. While a parent is pending its remaining keys are
stale, so a reader must not serve them: a layer checks `pending` (a set,
one truth test while nothing is being dropped) and reads through to the
database meanwhile, storing nothing. Without a running loop (a sync caller:
the admin process, a shell) the drop is done at once.

Like the cache, a SteppedDrop is confined to the event-loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

from caches.core.bounded import BoundedTTLCache

#: Keys a step drops (at least: whole `via` values). A key dropped in a step
#: costs about 0.75 us (its other scopes' index entries are updated key by
#: key, where a one-go server drop pops them whole): 25-50 us a step.
STEP_KEYS = 32


class SteppedDrop:
    """Drops one grouping value's keys of `cache` in steps, `via` value by value."""

    def __init__(
        self,
        cache: BoundedTTLCache[Any, Any],
        grouping: str,
        *,
        via: str,
        step: int = STEP_KEYS,
    ) -> None:
        cache.grouped_values(
            grouping, None, via
        )  # a KeyError now if it does not group it
        self.cache = cache
        self.grouping = grouping
        self.via = via
        self.step = max(step, 1)
        #: Parents whose keys are being dropped: their resident keys are stale.
        self.pending: set[Hashable] = set()
        self.steps = 0  # steps run so far (stats, tests)

    def drop(self, parent: Hashable) -> int:
        """Drop every key `parent` holds (in steps on a running loop); return how many."""
        cache = self.cache
        cache.clear_expired()  # what is counted is what is live
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return cache.invalidate_scope(self.grouping, parent)
        count = cache.grouped_size(self.grouping, parent, self.via)
        cache.detach_scope_loads(self.grouping, parent)
        if count and parent not in self.pending:
            self.pending.add(parent)
            loop.call_soon(self._step, parent)
        return count

    def _step(self, parent: Hashable) -> None:
        cache = self.cache
        self.steps += 1
        size = cache.scope_size
        batch: list[Hashable] = []
        keys = 0
        for value in cache.grouped_values(self.grouping, parent, self.via):
            if keys >= self.step:  # more left: the next loop iteration goes on
                cache.invalidate_scope_values(self.via, batch)
                asyncio.get_running_loop().call_soon(self._step, parent)
                return
            batch.append(value)
            keys += size(self.via, value)
        cache.invalidate_scope_values(self.via, batch)
        cache.invalidate_scope(self.grouping, parent)  # keys with no `via` value
        self.pending.discard(parent)
