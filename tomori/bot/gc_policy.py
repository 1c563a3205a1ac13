"""Keep the worker's start-up heap out of the cyclic GC's full collections.

At gateway ready a worker holds about half a million GC-tracked objects that
live as long as it does (discord.py's guilds, members, roles and channels, the
warmed caches). CPython's full (generation 2) collection walks every tracked
object, and it runs whenever the objects promoted since the last one exceed a
quarter of those: measured on the production scenario, two full collections
per 12,000 warm turns, each stalling the event loop 270-290 ms (45 us a turn,
amortised: more than a whole warm turn). `gc.freeze()` moves every object
alive at that moment to a permanent generation the collector never walks;
the full collections that still run then cover only what was allocated
since (about 3 ms each in the same run). Objects frozen are still freed by
reference counting as usual; only cyclic garbage among them would wait, so
the heap is collected once just before the freeze.
"""

from __future__ import annotations

import gc
import logging
import time

logger = logging.getLogger(__name__)

_frozen = False


def freeze_start_up() -> int | None:
    """Collect, then freeze every object alive now (once per process); return how many."""
    global _frozen
    if _frozen:
        return None
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    _frozen = True
    count = gc.get_freeze_count()
    logger.info(
        "gc: %d start-up objects frozen out of full collections (%.0f ms)",
        count,
        (time.perf_counter() - started) * 1000,
    )
    return count


def _reset_for_tests() -> None:
    """Unfreeze and forget that start-up was frozen (tests only)."""
    global _frozen
    gc.unfreeze()
    _frozen = False
