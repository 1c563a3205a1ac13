"""The one applier both transports feed: events onto this process's caches, in order, once.

The Redis subscriber hands it bus batches (deduplicated by origin and
sequence number; a gap sends it to the outbox), the outbox follower hands it
rows the bus did not deliver, and this process's own commits hand it their
events. It applies them on the caches' event-loop thread, logs each batch
from elsewhere in one bounded line, measures the lag, and clears every
invalidatable cache when a transport cannot know what it missed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from caches.bus.rejections import Rejections, clipped, shown
from caches.bus.stats import BusStats
from caches.core.loop import call_on_loop
from caches.messages import EventTuple, InvalidationBatch
from caches.registry import UnknownCacheError, UnknownOperationError

logger = logging.getLogger(__name__)

#: Apply a batch of events; may return how many named no known cache or op.
ApplyFn = Callable[[list[EventTuple]], int | None]
FlushFn = Callable[[], Any]

#: Origins whose last sequence number is remembered (older ones are forgotten).
MAX_ORIGINS = 1024


def _describe_plainly(events: Iterable[EventTuple]) -> list[str]:
    return [f"{name}: {op}({', '.join(map(repr, args))})" for name, op, args in events]


#: Turns a batch of events into words for the log (set_event_describer).
_describe: Callable[[Iterable[EventTuple]], list[str]] = _describe_plainly


def set_event_describer(describe: Callable[[Iterable[EventTuple]], list[str]]) -> None:
    """Make ``log_applied`` word events with ``describe`` (the invalidation phrases).

    ``CachesConfig.ready()`` installs ``caches.invalidation.describe``: the bus
    sits below the invalidation package and must not import it.
    """
    global _describe
    _describe = describe


def log_applied(events: list[EventTuple], origin: str) -> None:
    """Log one bounded line for a batch of invalidations from another process."""
    if not logger.isEnabledFor(logging.INFO):
        return
    try:
        words = [clipped(word, 200) for word in _describe(events[:5])]
    except Exception:  # noqa: BLE001 (words for a log line: never fail a batch)
        words = [shown(event) for event in events[:5]]
    more = len(events) - 5
    listed = "; ".join(words) + (f"; and {more} more" if more > 0 else "")
    logger.info("invalidated from %s: %s", clipped(origin, 200), listed)


def apply_to_registry(
    events: list[EventTuple], *, refused: Rejections | None = None
) -> int:
    """Apply events to this process's registry; return how many named nothing known.

    Every process builds every declared layer, so an event naming a cache or
    operation this process does not know came from a bug or a mismatched
    release: it is logged at ERROR and counted (`unknown_events`), never
    silently skipped, and never breaks the subscriber. The one exception is a
    cache only other processes hold (`registry.held_elsewhere`: the catalogs).
    An event whose arguments its operation refuses is logged the same way.
    `refused` logs the first of each kind only (default: a log of its own).
    """
    from caches.registry import registry

    refused = refused or Rejections(logger.error)
    unknown = 0
    for name, op, args in events:
        if name not in registry and name in registry.held_elsewhere:
            continue
        try:
            registry.apply(name, op, *args)
        except (UnknownCacheError, UnknownOperationError) as exc:
            unknown += 1
            event = f"{clipped(name, 100)}.{clipped(op, 100)}{shown(tuple(args))}"
            refused.note("dropped event", f"{name}.{op}", f"{event}: {exc}")
        except Exception as exc:  # noqa: BLE001 (one bad event, not the rest)
            event = f"{clipped(name, 100)}.{clipped(op, 100)}{shown(tuple(args))}"
            kind = f"{name}.{op}: {type(exc).__name__}"
            refused.note("could not apply", kind, f"{event}: {exc!r}")
    return unknown


def flush_registry() -> dict[str, int]:
    """Clear every invalidatable cache of this process's registry."""
    from caches.registry import registry

    return registry.clear_invalidatable()


class Applier:
    """Apply what the transports and this process's commits deliver, on the caches' loop."""

    def __init__(
        self,
        stats: BusStats,
        *,
        apply: ApplyFn | None = None,
        flush: FlushFn | None = None,
    ) -> None:
        self.stats = stats
        self.refused = Rejections(logger.error)
        self._apply: ApplyFn = apply or functools.partial(
            apply_to_registry, refused=self.refused
        )
        self._flush: FlushFn = flush or flush_registry
        self.loop: asyncio.AbstractEventLoop | None = None
        #: Called on a gap or a resubscription (the outbox follower's wake).
        self.catch_up: Callable[[], None] | None = None
        #: Told which outbox rows a batch carried, so the outbox skips them.
        self.note_outbox: Callable[[list[int]], None] | None = None
        self._seen: OrderedDict[str, int] = OrderedDict()

    def use(
        self,
        *,
        apply: ApplyFn | None = None,
        flush: FlushFn | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Apply with `apply`/`flush` (unchanged if None) on `loop`'s thread."""
        self._apply = apply or self._apply
        self._flush = flush or self._flush
        self.loop = loop

    # ------------------------------------------------------------ delivery

    def local(
        self, events: list[EventTuple], ids: list[int], sent_at: float, *, measure: bool
    ) -> None:
        """Apply this process's own committed `events` (stored in outbox rows `ids`)."""
        self.stats.incr("local")
        if self.note_outbox is not None:
            self.note_outbox(ids)
        self.deliver(events, sent_at, measure=measure)

    def batch(self, batch: InvalidationBatch) -> None:
        """Apply a batch another process published, once and in its sequence."""
        if not self._in_sequence(batch.origin, batch.seq):
            return
        if self.note_outbox is not None:
            self.note_outbox(list(batch.outbox))
        self.deliver(
            list(batch.events), batch.sent_at, measure=True, origin=batch.origin
        )

    def row(self, events: list[EventTuple], sent_at: float, origin: str) -> None:
        """Apply one outbox row the bus did not deliver."""
        self.deliver(events, sent_at, measure=True, origin=origin or "the outbox")

    def deliver(
        self,
        events: list[EventTuple],
        sent_at: float,
        *,
        measure: bool,
        origin: str = "",
    ) -> None:
        """Apply `events` on the caches' loop thread; log and measure as asked."""
        call_on_loop(self.loop, self._apply_now, events, sent_at, measure, origin)

    def _apply_now(
        self, events: list[EventTuple], sent_at: float, measure: bool, origin: str
    ) -> None:
        try:
            unknown = self._apply(events)
        except Exception as exc:  # noqa: BLE001 (a custom apply: one bounded line)
            self.refused.note(
                "could not apply", type(exc).__name__, f"a batch: {exc!r}"
            )
        else:
            if unknown:
                self.stats.incr("unknown_events", unknown)
        if origin:  # logged before it counts: a waiter on the count sees the line
            log_applied(events, origin)
        if measure:
            self.stats.applied(time.time() - sent_at)

    # ------------------------------------------------------------ order

    def forget_sequences(self) -> None:
        """Forget every origin's sequence (a new subscription starts them over)."""
        self._seen.clear()

    def _in_sequence(self, origin: str, seq: int) -> bool:
        last = self._seen.get(origin)
        if last is not None and seq <= last:
            self.stats.incr("duplicates")
            return False
        if last is not None and seq > last + 1:
            self.stats.incr("gaps")
            logger.warning("bus: %s skipped from seq %d to %d", origin, last, seq)
            self.recover("sequence gap")
        self._seen[origin] = seq
        self._seen.move_to_end(origin)
        if len(self._seen) > MAX_ORIGINS:
            self._seen.popitem(last=False)
        return True

    # ------------------------------------------------------------ catching up

    def recover(self, reason: str) -> None:
        """Catch up after `reason`: from the outbox if followed, else clear every cache."""
        if self.catch_up is not None and reason != "subscribed":
            logger.info("bus %s: catching up from the outbox", reason)
            self.catch_up()
        else:
            self.flush_all(reason)

    def flush_all(self, reason: str) -> None:
        """Clear every invalidatable cache, on the caches' loop thread."""
        call_on_loop(self.loop, self._flush_now, reason)

    def _flush_now(self, reason: str) -> None:
        try:
            removed = self._flush() or {}
        except Exception:
            logger.exception("bus: flush after %s failed", reason)
            removed = {}
        total = sum(removed.values()) if isinstance(removed, dict) else 0
        log = logger.info if reason == "subscribed" else logger.warning
        log("bus %s: cleared every invalidatable cache (%d entries)", reason, total)
        self.stats.incr("flushes")
