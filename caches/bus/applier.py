"""The one applier both transports feed: events onto this process's caches, in order, once.

The Redis subscriber hands it bus batches (deduplicated by origin and
sequence number; a gap sends it to the outbox), the outbox follower hands it
rows the bus did not deliver, and this process's own commits hand it their
events. It applies them on the caches' event-loop thread, logs each batch
from elsewhere in one bounded line, measures the lag, and clears every
invalidatable cache when a transport cannot know what it missed.

From another thread, deliveries wait in a queue that the loop drains at most
`STEP_EVENTS` events a callback (an outbox row's JSON text is parsed there
too, as its events are taken), so a 10,000-row UPDATE, 30,000 events in 300
outbox rows made outside Django or in one row of a Django write, never holds
the loop for longer than a Discord event's handler may (1 ms). On the loop's
own thread (this process's commits in the worker) a delivery is applied at
once, whole: a save is seen by the next read.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from caches.bus.rejections import Rejections, clipped, shown
from caches.bus.stats import BusStats
from caches.core.loop import call_on_loop, on_loop_thread
from caches.messages import EventTuple, InvalidationBatch
from caches.registry import UnknownCacheError, UnknownOperationError

logger = logging.getLogger(__name__)

#: Apply a batch of events; may return how many named no known cache or op.
ApplyFn = Callable[[list[EventTuple]], int | None]
FlushFn = Callable[[], Any]

#: Origins whose last sequence number is remembered (older ones are forgotten).
MAX_ORIGINS = 1024

#: Events one loop callback applies at most from the queue (about 2-3 us an
#: event, 1.5 us more to parse one from an outbox row's text: 32 keep a
#: callback well under the 1 ms a Discord handler may take;
#: benchmarks/outside_bulk_block.py).
STEP_EVENTS = 32


@dataclass(slots=True)
class _Delivery:
    """Events waiting on the loop, and what of them is applied so far."""

    events: Iterable[EventTuple]  # an outbox row's: parsed as they are taken
    sent_at: float
    measure: bool
    origin: str
    source: Iterator[EventTuple] | None = None  # the rest, once begun
    first: list[EventTuple] = field(default_factory=list)  # for the log line
    count: int = 0
    unknown: int = 0

    def take(self, most: int | None) -> list[EventTuple]:
        """Return up to `most` more events (None: all the rest)."""
        if self.source is None:
            self.source = _stream(self.events)
        part = list(self.source if most is None else islice(self.source, most))
        if len(self.first) < 5:
            self.first += part[: 5 - len(self.first)]
        self.count += len(part)
        return part


def _stream(events: Iterable[EventTuple]) -> Iterator[EventTuple]:
    """Return the events one by one (an outbox row's parsed as they are taken)."""
    stream = getattr(events, "stream", None)
    return stream() if stream is not None else iter(events)


class _Rows:
    """Several outbox rows' events, one after the other, each parsed as taken."""

    __slots__ = ("counted", "done", "parts", "times")

    def __init__(self) -> None:
        self.parts: list[Iterable[EventTuple]] = []
        self.times: list[float] = []  # when each row was written
        self.done = 0  # rows whose every event has been taken
        self.counted = 0  # rows counted as applied

    def stream(self) -> Iterator[EventTuple]:
        for part in self.parts:
            yield from _stream(part)
            self.done += 1

    def __iter__(self) -> Iterator[EventTuple]:
        return self.stream()


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


def log_applied(
    events: Sequence[EventTuple], origin: str, count: int | None = None
) -> None:
    """Log one bounded line for `count` invalidations from another process.

    `events` are the first of them, or all (`count` None).
    """
    if not logger.isEnabledFor(logging.INFO):
        return
    try:
        words = [clipped(word, 200) for word in _describe(events[:5])]
    except Exception:  # noqa: BLE001 (words for a log line: never fail a batch)
        words = [shown(event) for event in events[:5]]
    more = (len(events) if count is None else count) - 5
    listed = "; ".join(words) + (f"; and {more} more" if more > 0 else "")
    logger.info("invalidated from %s: %s", clipped(origin, 240), listed)


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
        #: Deliveries from other threads, applied in order by `_drain`.
        self._queue: deque[_Delivery] = deque()
        self._queue_lock = threading.Lock()
        #: The loop a `_drain` is scheduled on (None: none is).
        self._draining_on: asyncio.AbstractEventLoop | None = None

    def use(
        self,
        *,
        apply: ApplyFn | None = None,
        flush: FlushFn | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Apply with `apply`/`flush` (unchanged if None) on `loop`'s thread.

        What is still queued for the previous loop goes to this one (without
        a loop: applied here, now); a drain left on the previous loop stops.
        """
        self._apply = apply or self._apply
        self._flush = flush or self._flush
        self.loop = loop
        with self._queue_lock:
            self._draining_on = None
            waiting = bool(self._queue)
        if waiting:
            self._schedule()

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
        if batch.outbox and not batch.events:
            # Too large to send inline (`MAX_INLINE_EVENTS`): read from the
            # outbox. Counted once the follower is woken: a waiter sees both.
            self.recover(
                f"{clipped(batch.origin, 200)} sent a large write by the outbox"
            )
            self.stats.incr("by_outbox")
            return
        if self.note_outbox is not None:
            self.note_outbox(list(batch.outbox))
        self.deliver(
            list(batch.events), batch.sent_at, measure=True, origin=batch.origin
        )

    def rows(self, rows: Iterable[tuple[Sequence[EventTuple], float, str]]) -> None:
        """Apply outbox rows the bus did not deliver: (events, created at, origin) each.

        Consecutive rows of one origin (a statement's rows, a writer's
        backlog) are one delivery and one log line saying how many rows (a
        10,000-row UPDATE is one line, not 300); each row still counts as
        applied, with its own lag, as its last event is applied.
        """
        groups: list[tuple[str, _Rows]] = []
        for events, sent_at, origin in rows:
            origin = origin or "the outbox"
            if not groups or groups[-1][0] != origin:
                groups.append((origin, _Rows()))
            groups[-1][1].parts.append(events)
            groups[-1][1].times.append(sent_at)
        self._enqueue(
            _Delivery(group, min(group.times), True, origin) for origin, group in groups
        )

    def deliver(
        self,
        events: Sequence[EventTuple],
        sent_at: float,
        *,
        measure: bool,
        origin: str = "",
    ) -> None:
        """Apply `events` on the caches' loop thread; log and measure as asked."""
        self._enqueue((_Delivery(events, sent_at, measure, origin),))

    def _enqueue(self, deliveries: Iterable[_Delivery]) -> None:
        loop = self.loop
        if loop is None or not loop.is_running() or on_loop_thread(loop):
            for delivery in deliveries:  # at once, whole (see the module's doc)
                self._apply_steps(delivery, None)
            return
        with self._queue_lock:
            self._queue.extend(deliveries)
        self._schedule()

    def _schedule(self) -> None:
        """Have the loop drain the queue (now, here, if there is no running loop)."""
        loop = self.loop
        with self._queue_lock:
            if self._draining_on is loop and loop is not None:
                return  # a drain is on its way there
            self._draining_on = loop
        if loop is not None and loop.is_running() and not on_loop_thread(loop):
            try:
                loop.call_soon_threadsafe(self._drain, loop)
                return
            except RuntimeError:  # closed between the check and the call
                pass
        self._drain(loop, step=None)

    def _drain(
        self, loop: asyncio.AbstractEventLoop | None, step: int | None = STEP_EVENTS
    ) -> None:
        """Apply at most `step` queued events (None: all), then come back for more."""
        budget = step
        while budget is None or budget > 0:
            with self._queue_lock:
                if self._draining_on is not loop:
                    return  # a stale drain: the queue went to another loop
                if not self._queue:
                    self._draining_on = None
                    return
                delivery = self._queue[0]
            try:
                applied, finished = self._apply_steps(delivery, budget)
            except Exception:  # never leave the queue stuck behind one delivery
                logger.exception("bus: applying a delivery failed")
                applied, finished = 1, True
            if budget is not None:
                budget -= max(applied, 1)
            if finished:
                with self._queue_lock:
                    if self._queue and self._queue[0] is delivery:
                        self._queue.popleft()
        assert loop is not None  # a budget is only given on a loop
        loop.call_soon(self._drain, loop)

    def _apply_steps(self, delivery: _Delivery, budget: int | None) -> tuple[int, bool]:
        """Apply up to `budget` more of `delivery`'s events (None: all); log and
        measure once it is done. Return how many were applied and whether it is.
        """
        part = delivery.take(budget)
        if part:
            try:
                delivery.unknown += self._apply(part) or 0
            except Exception as exc:  # noqa: BLE001 (a custom apply: one bounded line)
                self.refused.note(
                    "could not apply", type(exc).__name__, f"a batch: {exc!r}"
                )
        if budget is not None and len(part) == budget:
            self._count_rows(delivery)  # a row at a time, as each is done
            return len(part), False  # maybe more: the next step says
        self._finished(delivery)
        return len(part), True

    def _count_rows(self, delivery: _Delivery) -> None:
        """Count the outbox rows of `delivery` applied so far as applied, with their lag."""
        rows = delivery.events
        if not isinstance(rows, _Rows) or rows.counted >= rows.done:
            return
        now = time.time()
        for sent_at in rows.times[rows.counted : rows.done]:
            self.stats.applied(now - sent_at)
        rows.counted = rows.done

    def _finished(self, delivery: _Delivery) -> None:
        if delivery.unknown:
            self.stats.incr("unknown_events", delivery.unknown)
        # Logged before it counts: a waiter on the count sees the line.
        rows = delivery.events if isinstance(delivery.events, _Rows) else None
        if delivery.origin:
            origin = delivery.origin
            if rows is not None and len(rows.parts) > 1:
                origin = f"{clipped(origin, 200)} ({len(rows.parts)} outbox rows)"
            log_applied(delivery.first, origin, delivery.count)
        if rows is not None:
            self._count_rows(delivery)
        elif delivery.measure:
            self.stats.applied(time.time() - delivery.sent_at)

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
