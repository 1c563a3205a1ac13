"""The worker's last durable writes: flushed from the stop signal until the shutdown deadline.

Short-term memory's durable writes are the one thing a shutdown can lose.
They start flushing the moment shutdown begins, beside the other steps
(closing the gateway, the bus, the catalogs), so that no step, however long
it waits, takes time from them: the flush has the whole budget.
"""

from __future__ import annotations

import asyncio
import logging

from caches.layers.short_term_memory import short_term_memory_store

logger = logging.getLogger(__name__)

#: The steps after the durable flush get this long before the deadline.
SHUTDOWN_MARGIN_SECONDS = 1.0
#: The least a flush is given, however late the other steps finish.
MIN_FLUSH_SECONDS = 0.5


class DurableFlush:
    """Flush short-term memory's durable writes from now until `deadline` (loop time)."""

    def __init__(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        self._store = short_term_memory_store()
        self._started = loop.time()
        self._until = deadline - SHUTDOWN_MARGIN_SECONDS
        self._early = loop.create_task(self._store.flush(), name="durable-flush")

    async def finish(self) -> int:
        """Store what is left until the deadline; log the outcome, return the writes left."""
        loop = asyncio.get_running_loop()
        remaining = max(MIN_FLUSH_SECONDS, self._until - loop.time())
        try:
            await asyncio.wait_for(self._rest(), remaining)
        except TimeoutError:
            pass
        except Exception:  # noqa: BLE001 (count what is left, exit anyway)
            logger.exception("flushing short-term memory writes failed")
        return self._report(loop.time() - self._started)

    async def _rest(self) -> None:
        await self._early  # begun at the signal
        await self._store.flush()  # and what the last turns queued since

    def _report(self, took: float) -> int:
        store = self._store
        left, behind = store.pending_count(), store.turns_behind()
        if left:
            logger.error(
                "short-term memory: %d durable writes (keys) not stored at shutdown, "
                "%d turns behind; the database did not take them within %.1f s",
                left,
                behind,
                took,
            )
            return left
        keys, turns = self._store.memory_totals()
        logger.info(
            "short-term memory: every durable write is stored "
            "(%d keys holding %d turns in memory)",
            keys,
            turns,
        )
        return 0
