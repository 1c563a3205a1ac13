"""Queued, ordered, coalescing writes of short-term memory's durable fields.

The cache is written first and answers at once; the table is written after,
from a background task, so a reply never waits on the database. Writes are
kept in submission order (a clear followed by a new summary lands as a delete
then an upsert) and coalesce per key: a key written five times while a batch
is in flight is written once, with its latest value. Each batch is applied in
one transaction. A failed batch is logged and dropped: the cache still holds
the state, and the next write of a key carries its full durable value.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Sequence

from asgiref.sync import sync_to_async

from tomori.repositories.memory import (
    DeleteKeys,
    DeleteWhere,
    DurableMemory,
    MemoryWrite,
)

logger = logging.getLogger(__name__)

Apply = Callable[[Sequence[MemoryWrite]], None]


def where_matches(where: DeleteWhere, record: DurableMemory) -> bool:
    """Tell whether a bulk delete covers `record`."""
    return all(
        wanted is None or wanted == actual
        for wanted, actual in (
            (where.scope, record.scope),
            (where.user_disc_id, record.user_disc_id),
            (where.server_disc_id, record.server_disc_id),
            (where.channel_disc_id, record.channel_disc_id),
        )
    )


def _slot(write: MemoryWrite) -> Hashable:
    if isinstance(write, DurableMemory):
        return write.cache_key
    if isinstance(write, DeleteKeys) and len(write.cache_keys) == 1:
        return write.cache_keys[0]
    return write


class DurableWriter:
    """An ordered write-behind queue with per-key coalescing."""

    def __init__(self, apply: Apply) -> None:
        self._apply = apply
        self._pending: dict[Hashable, MemoryWrite] = {}
        self._in_flight: list[MemoryWrite] = []
        self._task: asyncio.Task[None] | None = None
        self.batches = 0
        self.writes = 0
        self.failures = 0

    def pending_count(self) -> int:
        """Return how many writes wait (queued or in the running batch)."""
        return len(self._pending) + len(self._in_flight)

    def submit(self, write: MemoryWrite) -> None:
        """Queue `write` after every earlier one, replacing a queued write of its key."""
        slot = _slot(write)
        self._pending.pop(slot, None)  # re-inserting moves it to the end
        if isinstance(write, DeleteWhere):
            self._drop_pending_upserts(write)
        self._pending[slot] = write
        self._start()

    def _drop_pending_upserts(self, where: DeleteWhere) -> None:
        for slot, queued in list(self._pending.items()):
            if isinstance(queued, DurableMemory) and where_matches(where, queued):
                del self._pending[slot]

    def _start(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # Sync caller (a script, the shell): nothing to overlap with.
            self._apply_batch_now()
            return
        task = self._task
        if task is None or task.done() or task.get_loop() is not loop:
            self._task = loop.create_task(self._drain(), name="stm-durable-writes")

    def _take_batch(self) -> list[MemoryWrite]:
        batch = list(self._pending.values())
        self._pending.clear()
        self._in_flight = batch
        return batch

    def _apply_batch_now(self) -> None:
        batch = self._take_batch()
        try:
            self._run(batch)
        finally:
            self._in_flight = []

    async def _drain(self) -> None:
        while self._pending:
            batch = self._take_batch()
            try:
                await sync_to_async(self._run)(batch)
            finally:
                self._in_flight = []

    def _run(self, batch: list[MemoryWrite]) -> None:
        try:
            self._apply(batch)
        except Exception as error:
            # Only the type: the message may quote SQL with summaries in it.
            self.failures += 1
            logger.warning(
                "short-term memory: dropped %d durable writes (%s)",
                len(batch),
                type(error).__name__,
            )
            return
        self.batches += 1
        self.writes += len(batch)

    async def flush(self) -> None:
        """Wait until every queued write has been applied (worker shutdown)."""
        loop = asyncio.get_running_loop()
        while True:
            task = self._task
            if task is not None and task.get_loop() is not loop:
                task = None  # left behind by a loop that is gone
            if (task is None or task.done()) and self._pending:
                self._start()
                task = self._task
            if task is None or task.done():
                return
            await asyncio.shield(task)

    def overlay(self, key: str, record: DurableMemory | None) -> DurableMemory | None:
        """Return `record` (read from the table) as the queued writes will leave it."""
        for write in (*self._in_flight, *self._pending.values()):
            if isinstance(write, DurableMemory):
                if write.cache_key == key:
                    record = write
            elif isinstance(write, DeleteKeys):
                if key in write.cache_keys:
                    record = None
            elif record is not None and where_matches(write, record):
                record = None
        return record
