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

From then on the young generation is collected every YOUNG_THRESHOLD net
allocations instead of CPython's 700: most of a turn's objects die by
reference counting before a collection would see them, and the middle
generation (collected every tenth young collection) re-walks the turns'
survivors about 14 times less often. Measured on the production scenario
at 150 msg/s (`benchmarks/message_cost.py`, 90 s, 13,500 messages): the
collections' time fell from 381 to 141 ms (147 young and 13 middle
collections of 1.3 and 9.5 ms against 6 and 1 of 14 and 55 ms); cyclic
garbage waits for at most YOUNG_THRESHOLD more net allocations (peak RSS
over 60,000 messages 191.9 MB, under the production scenario's 200 MB bar:
docs/memory.md).
"""

from __future__ import annotations

import gc
import logging
import time

logger = logging.getLogger(__name__)

#: The young generation's threshold once start-up is frozen (CPython's is 700).
YOUNG_THRESHOLD = 10_000

_frozen = False
_thresholds = gc.get_threshold()  # the interpreter's, restored by _reset_for_tests


def freeze_start_up() -> int | None:
    """Collect, then freeze every object alive now (once per process); return how many."""
    global _frozen
    if _frozen:
        return None
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    _frozen = True
    count = gc.get_freeze_count()
    logger.info(
        "gc: %d start-up objects frozen out of full collections (%.0f ms); "
        "young collections every %d allocations",
        count,
        (time.perf_counter() - started) * 1000,
        YOUNG_THRESHOLD,
    )
    return count


def _reset_for_tests() -> None:
    """Unfreeze, restore the thresholds and forget that start-up was frozen (tests only)."""
    global _frozen
    gc.unfreeze()
    gc.set_threshold(*_thresholds)
    _frozen = False
