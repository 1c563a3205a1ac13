"""The bus of one process: its two transports feeding one applier, and its commands.

The Redis transport (`redis_transport`) is the fast path; the outbox follower
(`caches.outbox`) the durable one; both hand what they receive to the one
`Applier`, which applies it in order, once, on the caches' loop. A commit
in this process is published for the others and, where this process holds
caches (`caches.process_identity`), applied here too.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from caches import process_identity
from caches.bus.applier import (
    Applier,
    ApplyFn,
    FlushFn,
    apply_to_registry,
    flush_registry,
    log_applied,
    set_event_describer,
)
from caches.bus.commands import CommandHandler, HandlerRunner
from caches.bus.publisher import RedisPublisher
from caches.bus.redis_transport import RedisTransport, subscriber_name
from caches.bus.stats import BusStats
from caches.messages import AnyCommand, EventTuple, InvalidationBatch, WorkerReply

#: Events a published batch carries at most; a larger write's batch names
#: only its outbox rows (`Applier.batch` has receivers read them there).
MAX_INLINE_EVENTS = 500

if TYPE_CHECKING:
    from caches.outbox import OutboxFollower

__all__ = [
    "ApplyFn",
    "Bus",
    "FlushFn",
    "OutboxOptions",
    "apply_to_registry",
    "flush_registry",
    "log_applied",
    "set_event_describer",
]


class OutboxOptions(NamedTuple):
    """How a subscriber follows the invalidation outbox (seconds)."""

    interval: float
    retention: float


class Bus:
    """Deliver invalidations to this process and every other, and carry commands."""

    def __init__(
        self,
        *,
        redis_url: str = "",
        channel: str = "tomori:bus",
        worker_id: str = "",
        origin: str = "",
        apply: ApplyFn | None = None,
        flush: FlushFn | None = None,
    ) -> None:
        self.redis_url = redis_url
        self.channel = channel
        self.worker_id = worker_id
        # The process's own origin for its bus; any other bus a fresh one.
        self.origin = origin or (
            f"{process_identity.current().label}:{secrets.token_hex(3)}"
        )
        self.stats = BusStats()
        self.applier = Applier(self.stats, apply=apply, flush=flush)
        self._runner = HandlerRunner(origin=self.origin, worker_id=worker_id)
        self._redis: RedisTransport | None = None
        if redis_url:
            self._redis = RedisTransport(
                redis_url,
                channel,
                origin=self.origin,
                applier=self.applier,
                runner=self._runner,
                stats=self.stats,
            )
        self._follower: OutboxFollower | None = None

    @property
    def subscriber_name(self) -> str:
        """Return the Redis client name of the subscriber connection (CLIENT LIST)."""
        return subscriber_name(self.origin)

    @property
    def mode(self) -> str:
        """Return "redis" or "local" (in-process only)."""
        return "redis" if self._redis is not None else "local"

    @property
    def _publisher(self) -> RedisPublisher | None:
        return self._redis.publisher if self._redis is not None else None

    # ------------------------------------------------------------ invalidations

    def broadcast(
        self,
        events: Iterable[EventTuple],
        *,
        sent_at: float | None = None,
        outbox_ids: Iterable[int] = (),
    ) -> None:
        """Apply committed `events` here (if this process holds caches) and publish them.

        `outbox_ids` are the outbox rows holding them: this process's own
        outbox follower skips them, and so does every receiver's.
        """
        events = [(name, op, tuple(args)) for name, op, args in events]
        ids = list(outbox_ids)
        sent = time.time() if sent_at is None else sent_at
        if process_identity.current().holds_caches:
            # In-process mode this is the whole delivery, so it is what lag measures.
            self.applier.local(events, ids, sent, measure=self._redis is None)
        if self._redis is not None:
            # A large write goes by its outbox rows: each receiver's follower
            # reads them and its loop parses them in steps, where parsing one
            # huge message on the subscriber thread would hold the GIL (and
            # so the loop) for tens of milliseconds.
            inline = (
                tuple(events) if len(events) <= MAX_INLINE_EVENTS or not ids else ()
            )
            self._redis.publish_later(
                lambda seq: InvalidationBatch(
                    origin=self.origin,
                    seq=seq,
                    sent_at=sent,
                    events=inline,
                    outbox=tuple(ids),
                )
            )

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
        self.applier.use(apply=apply, flush=flush, loop=loop)
        self._runner.loop = loop
        if outbox is not None and self._follower is None:
            self._follower = self._start_follower(outbox)
        if self._redis is None:
            self.stats.set_connected(True)
            return
        self._redis.subscribe()

    def _start_follower(self, options: OutboxOptions) -> OutboxFollower:
        from caches.outbox import OutboxFollower

        follower = OutboxFollower(
            deliver=self.applier.rows,
            flush=self.applier.flush_all,
            interval=options.interval,
            retention=options.retention,
            on_stats=self.stats.incr,
        )
        self.applier.catch_up = follower.wake
        self.applier.note_outbox = follower.note_applied
        follower.start()
        return follower

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the subscriber and outbox threads and the command runner, joining them.

        An outbox read waiting on the database is left to end by itself.
        """
        if self._redis is not None:
            self._redis.stop(timeout)
        if self._follower is not None:
            self._follower.stop(timeout)
            self._follower = None
            self.applier.catch_up = self.applier.note_outbox = None
        self.applier.use(loop=None)
        self._runner.loop = None
        self.stats.set_connected(False)

    def close(self, *, drain_timeout: float = 5.0) -> None:
        """Stop everything, publish any backlog (up to `drain_timeout` s), disconnect."""
        self.stop()
        if self._redis is not None:
            self._redis.close(drain_timeout=drain_timeout)

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
        handler, and workers a command for another worker (`OnWorker`) is not
        for, do not reply (but are not waited for). Blocking: never call it
        on the event-loop thread that runs the handler.
        """
        if self._redis is None:
            return self._runner.answers(command, timeout)
        listening = self._redis.subscribed and self.stats.connected
        return self._redis.commands.send(
            command, timeout=timeout, listening_here=listening
        )

    def require_sendable(self, *, timeout: float) -> None:
        """Raise BusUnavailable unless a command sent now would be published.

        For a command that says what it will do before sending: it must not
        say it when nothing can be sent. An in-process bus can always send.
        """
        if self._redis is not None:
            self._redis.commands.require_sendable(timeout)

    # ------------------------------------------------------------ stats

    def snapshot(self) -> dict[str, Any]:
        """Return the bus's mode, identity, counters, backlog and lag percentiles."""
        publisher = self._publisher
        return {
            "mode": self.mode,
            "origin": self.origin,
            "worker_id": self.worker_id,
            "channel": self.channel,
            "subscribed": self._redis is not None and self._redis.subscribed,
            "backlog": publisher.backlog if publisher else 0,
            "outbox": self._outbox_status(),
            **self.stats.snapshot(),
        }
