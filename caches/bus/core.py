"""The bus of one process: local delivery, Redis publishing, subscribing and commands."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from caches.bus.commands import (
    CommandHandler,
    HandlerRunner,
    RedisCommands,
)
from caches.bus.publisher import RedisPublisher
from caches.bus.rejections import Rejections, clipped, shown
from caches.bus.stats import BusStats
from caches.bus.subscriber import RedisSubscriber
from caches.core.loop import call_on_loop
from caches.messages import (
    AnyCommand,
    CommandMessage,
    EventTuple,
    InvalidationBatch,
    MalformedMessage,
    WorkerReply,
    decode,
)
from caches.registry import UnknownCacheError, UnknownOperationError

if TYPE_CHECKING:
    from caches.outbox import OutboxFollower

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


class OutboxOptions(NamedTuple):
    """How a subscriber follows the invalidation outbox (seconds)."""

    interval: float
    retention: float


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
            refused.note("dropped event", f"{name}.{op}", f"{shown(args)}: {exc}")
        except Exception as exc:  # noqa: BLE001 (one bad event, not the rest)
            kind = f"{name}.{op}: {type(exc).__name__}"
            refused.note("could not apply", kind, f"{shown(args)}: {exc}")
    return unknown


def flush_registry() -> dict[str, int]:
    """Clear every invalidatable cache of this process's registry."""
    from caches.registry import registry

    return registry.clear_invalidatable()


class Bus:
    """Deliver invalidations to this process and every other, and carry commands."""

    def __init__(
        self,
        *,
        redis_url: str = "",
        channel: str = "tomori:bus",
        worker_id: str = "",
        apply: ApplyFn | None = None,
        flush: FlushFn | None = None,
    ) -> None:
        self.redis_url = redis_url
        self.channel = channel
        self.worker_id = worker_id
        self.origin = (
            f"{worker_id or socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        )
        self.stats = BusStats()
        self._refused = Rejections(logger.error)
        self._rejected = Rejections(logger.warning, count=self.stats.incr)
        self._apply: ApplyFn = apply or functools.partial(
            apply_to_registry, refused=self._refused
        )
        self._flush: FlushFn = flush or flush_registry
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner = HandlerRunner(origin=self.origin, worker_id=worker_id)
        self._publisher: RedisPublisher | None = None
        self._commands: RedisCommands | None = None
        if redis_url:
            self._publisher = RedisPublisher(redis_url, channel, self.stats)
            self._commands = RedisCommands(
                redis_url,
                publisher=self._publisher,
                runner=self._runner,
                stats=self.stats,
            )
        self._subscriber: RedisSubscriber | None = None
        self._follower: OutboxFollower | None = None
        self._seen: OrderedDict[str, int] = OrderedDict()
        self._subscribed_before = False

    @property
    def subscriber_name(self) -> str:
        """Return the Redis client name of the subscriber connection (CLIENT LIST)."""
        return "tomori-bus-sub-" + "".join(
            c if c.isalnum() else "-" for c in self.origin
        )

    @property
    def mode(self) -> str:
        """Return "redis" or "local" (in-process only)."""
        return "redis" if self._publisher is not None else "local"

    # ------------------------------------------------------------ invalidations

    def broadcast(
        self,
        events: Iterable[EventTuple],
        *,
        sent_at: float | None = None,
        outbox_ids: Iterable[int] = (),
    ) -> None:
        """Apply committed `events` here and publish them to every other process.

        `outbox_ids` are the outbox rows holding them: this process's own
        outbox follower skips them, and so does every receiver's.
        """
        events = [(name, op, tuple(args)) for name, op, args in events]
        ids = list(outbox_ids)
        sent = time.time() if sent_at is None else sent_at
        self.stats.incr("local")
        if self._follower is not None:
            self._follower.note_applied(ids)
        # In-process mode this is the whole delivery, so it is what lag measures.
        self._deliver(events, sent, measure=self._publisher is None)
        if self._publisher is not None:
            self._publisher.publish_later(
                lambda seq: InvalidationBatch(
                    origin=self.origin,
                    seq=seq,
                    sent_at=sent,
                    events=tuple(events),
                    outbox=tuple(ids),
                )
            )

    def _deliver(
        self,
        events: list[EventTuple],
        sent_at: float,
        *,
        measure: bool,
        origin: str = "",
    ) -> None:
        self._call_on_loop(self._apply_now, events, sent_at, measure, origin)

    def _apply_now(
        self, events: list[EventTuple], sent_at: float, measure: bool, origin: str
    ) -> None:
        try:
            unknown = self._apply(events)
        except Exception:
            logger.exception("bus: applying %d event(s) failed", len(events))
        else:
            if unknown:
                self.stats.incr("unknown_events", unknown)
        if origin:  # logged before it counts: a waiter on the count sees the line
            log_applied(events, origin)
        if measure:
            self.stats.applied(time.time() - sent_at)

    def _call_on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        # Caches belong to the event-loop thread; hop there when there is one.
        call_on_loop(self._loop, fn, *args)

    # ------------------------------------------------------------ subscribing

    def start_subscriber(
        self,
        *,
        apply: ApplyFn | None = None,
        flush: FlushFn | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        outbox: OutboxOptions | None = None,
    ) -> None:
        """Start receiving other processes' messages (no thread in local mode).

        `apply`/`flush` default to this process's registry; with `loop` both
        run on that loop's thread, local deliveries included. With `outbox`,
        also follow the invalidation outbox (in local mode too: it is how a
        second process reaches this one without Redis). Start it before
        warming caches: the first subscription clears every invalidatable one.
        """
        self._apply = apply or self._apply
        self._flush = flush or self._flush
        self._loop = self._runner.loop = loop
        if outbox is not None and self._follower is None:
            self._follower = self._start_follower(outbox)
        if self._publisher is None:
            self.stats.set_connected(True)
            return
        if self._subscriber is None:
            self._subscriber = RedisSubscriber(
                self.redis_url,
                self.channel,
                on_subscribed=self._on_subscribed,
                on_message=self._on_message,
                on_lost=self._on_lost,
                name=self.subscriber_name,
            )
            self._subscriber.start()

    def _start_follower(self, options: OutboxOptions) -> OutboxFollower:
        from caches.outbox import OutboxFollower

        follower = OutboxFollower(
            deliver=lambda events, sent_at, origin: self._deliver(
                events, sent_at, measure=True, origin=origin or "the outbox"
            ),
            flush=self._flush_all,
            interval=options.interval,
            retention=options.retention,
            on_stats=self.stats.incr,
        )
        follower.start()
        return follower

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the subscriber and outbox threads and the command runner, joining them.

        An outbox read waiting on the database is left to end by itself.
        """
        if self._subscriber is not None:
            self._subscriber.stop(timeout)
            self._subscriber = None
        if self._follower is not None:
            self._follower.stop(timeout)
            self._follower = None
        if self._commands is not None:
            self._commands.stop()
        self._loop = self._runner.loop = None
        self.stats.set_connected(False)

    def close(self, *, drain_timeout: float = 5.0) -> None:
        """Stop everything, publish any backlog (up to `drain_timeout` s), disconnect."""
        self.stop()
        if self._publisher is not None:
            self._publisher.close(drain_timeout=drain_timeout)
        if self._commands is not None:
            self._commands.close()

    def _on_subscribed(self) -> None:
        reason = "reconnected" if self._subscribed_before else "subscribed"
        self._subscribed_before = True
        self._seen.clear()
        self.stats.set_connected(True)
        # It cannot know what it missed while not subscribed: the outbox does.
        self._catch_up(reason)

    def _catch_up(self, reason: str) -> None:
        if self._follower is not None and reason != "subscribed":
            logger.info("bus %s: catching up from the outbox", reason)
            self._follower.wake()
        else:
            self._flush_all(reason)

    def _on_lost(self, exc: Exception) -> None:
        if self.stats.connected:
            logger.warning(
                "bus: subscription to %s lost (%s); reconnecting", self.channel, exc
            )
        self.stats.set_connected(False)
        self.stats.incr("disconnects")

    def _flush_all(self, reason: str) -> None:
        self._call_on_loop(self._flush_now, reason)

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

    def _on_message(self, data: Any) -> None:
        self.stats.incr("received")
        try:
            message = decode(data)
        except MalformedMessage as exc:
            # Dropped, not applied: if it was an invalidation, the sequence gap
            # it leaves sends this process to the outbox.
            self._rejected.note(
                "dropped a malformed message", exc.kind, str(exc), counter="rejected"
            )
            return
        if message.origin == self.origin:
            self.stats.incr("own_skipped")
            return
        if isinstance(message, CommandMessage) and self._commands is not None:
            self._commands.submit_answer(message)
        if isinstance(message, InvalidationBatch):
            self._on_batch(message)

    def _on_batch(self, batch: InvalidationBatch) -> None:
        if not self._in_sequence(batch.origin, batch.seq):
            return
        if self._follower is not None:
            self._follower.note_applied(list(batch.outbox))
        self._deliver(
            list(batch.events), batch.sent_at, measure=True, origin=batch.origin
        )

    def _in_sequence(self, origin: str, seq: int) -> bool:
        last = self._seen.get(origin)
        if last is not None and seq <= last:
            self.stats.incr("duplicates")
            return False
        if last is not None and seq > last + 1:
            self.stats.incr("gaps")
            logger.warning("bus: %s skipped from seq %d to %d", origin, last, seq)
            self._catch_up("sequence gap")
        self._seen[origin] = seq
        self._seen.move_to_end(origin)
        if len(self._seen) > MAX_ORIGINS:
            self._seen.popitem(last=False)
        return True

    def _outbox_status(self) -> dict[str, Any]:
        follower = self._follower
        if follower is None:
            return {"following": False}
        return {
            "following": True,
            "applied_through": follower.tracker.high,
            "open_gaps": follower.tracker.gap_count,
            "interval_s": follower.interval,
        }

    # ------------------------------------------------------------ commands

    def set_command_handler(self, handler: CommandHandler | None) -> None:
        """Run `handler(command) -> WorkerReply` (or an awaitable of one) for commands."""
        self._runner.handler = handler

    def send_command(self, command: AnyCommand, *, timeout: float) -> list[WorkerReply]:
        """Send `command` to every worker; return the replies that came before `timeout`.

        This process's own handler, if any, answers too. Processes without a
        handler do not reply (but are not waited for). Blocking: never call
        it on the event-loop thread that runs the handler.
        """
        if self._commands is None:
            return [self._runner.run(command, timeout)] if self._runner.handler else []
        listening = self._subscriber is not None and self.stats.connected
        return self._commands.send(command, timeout=timeout, listening_here=listening)

    # ------------------------------------------------------------ stats

    def snapshot(self) -> dict[str, Any]:
        """Return the bus's mode, identity, counters, backlog and lag percentiles."""
        return {
            "mode": self.mode,
            "origin": self.origin,
            "worker_id": self.worker_id,
            "channel": self.channel,
            "subscribed": self._subscriber is not None,
            "backlog": self._publisher.backlog if self._publisher else 0,
            "outbox": self._outbox_status(),
            **self.stats.snapshot(),
        }
