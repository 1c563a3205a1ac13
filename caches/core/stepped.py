"""Drop a large grouping value in bounded steps on the event loop (no long block).

Why. Deleting a key from a dict of 100,000 costs a few random memory reads
(its index slot, its entry, the key object): 0.2-0.4 us a key, measured
(benchmarks/scoped_invalidation.py). However good the index, a server
holding 1,000 keys then takes 0.3-0.4 ms to drop in one go, and nothing
else runs on the loop meanwhile.

How. `drop(parent)` answers at once with how many keys `parent` holds in
the grouping: it stales the parent's in-flight loads and marks the parent
`pending`. A task on the running loop then drops the parent's keys at most
`step` at a time, one step per loop iteration, through the values of scope
`via` (a few users' spotlights at a time; a value holding more than `step`
keys goes key by key), until none is left; a last sweep of the grouping
drops any key that had no `via` value. While a parent is pending its
remaining keys are stale, so a reader must not serve them: a layer checks
`pending` (a set, one truth test while nothing is being dropped) and reads
through to the database meanwhile, storing nothing. Whatever ends the task
early (its loop shutting down and cancelling it, an error in a step) drops
the rest at once, so a parent never stays pending. Without a running loop
(a sync caller: the admin process, a shell) the drop is done at once.

Like the cache, a SteppedDrop is confined to the event-loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

from caches.core.bounded import BoundedTTLCache

#: Keys a step drops at most (whole `via` values, or one value's keys one by
#: one when it holds more). A key dropped in a step costs about 0.75 us (its
#: other scopes' index entries are updated key by key, where a one-go server
#: drop pops them whole): 25-50 us a step.
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
        # A KeyError now if `grouping` does not group `via`.
        cache.grouped_values(grouping, None, via)
        self.cache = cache
        self.grouping = grouping
        self.via = via
        self.step = max(step, 1)
        #: Parents whose keys are being dropped: their resident keys are stale.
        self.pending: set[Hashable] = set()
        self._tasks: dict[Hashable, asyncio.Task[None]] = {}
        self.steps = 0  # steps run so far (stats, tests)

    def drop(self, parent: Hashable) -> int:
        """Drop every key `parent` holds (in steps on a running loop); return how many."""
        cache = self.cache
        cache.clear_expired()  # what is counted is what is live
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self._finish(parent)
        if cache.scope_is_total(self.via):  # each key has a `via` value: cheap
            count = cache.grouped_size(self.grouping, parent, self.via)
        else:
            count = len(cache.keys_in_scope(self.grouping, parent))
        cache.detach_scope_loads(self.grouping, parent)
        task = self._tasks.get(parent)
        if task is not None and not task.done() and task.get_loop() is loop:
            return count  # its steps go on: they read what is left
        if count:
            self.pending.add(parent)
            self._tasks[parent] = loop.create_task(
                self._run(parent), name=f"stepped-drop:{cache.name}"
            )
        return count

    async def _run(self, parent: Hashable) -> None:
        try:
            while self._step(parent):
                await asyncio.sleep(0)  # the loop's turn between two steps
        finally:  # done, cancelled or failed: nothing of the parent stays
            self._finish(parent)
            self._tasks.pop(parent, None)

    def _step(self, parent: Hashable) -> bool:
        """Drop at most `step` of the parent's keys; False if no `via` value was left."""
        cache, via = self.cache, self.via
        self.steps += 1
        size = cache.scope_size
        batch: list[Hashable] = []
        keys = 0
        for value in cache.grouped_values(self.grouping, parent, via, limit=self.step):
            held = size(via, value)
            if held > self.step and not batch:  # too big for one step: key by key
                for key in cache.keys_in_scope(via, value)[: self.step]:
                    cache.invalidate(key)
                return True
            if keys + held > self.step and batch:
                break
            batch.append(value)
            keys += held
        if not batch:
            return False
        cache.invalidate_scope_values(via, batch)
        return True

    def _finish(self, parent: Hashable) -> int:
        """Drop what is left of `parent` at once; return how many keys that was."""
        self.pending.discard(parent)
        return self.cache.invalidate_scope(self.grouping, parent)
