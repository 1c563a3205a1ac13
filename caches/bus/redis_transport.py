"""The Redis transport: publish batches and commands on one channel, subscribe, feed the applier.

One of the bus's two transports (the other is the outbox follower). It owns
the publisher, the subscriber and the command round trips; what it receives
it validates (`caches.messages.decode`), skips when it is this process's
own, and hands to the applier, which orders and applies it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from caches.bus.applier import Applier
from caches.bus.commands import HandlerRunner, RedisCommands
from caches.bus.publisher import RedisPublisher
from caches.bus.rejections import Rejections
from caches.bus.stats import BusStats
from caches.bus.subscriber import RedisSubscriber
from caches.messages import (
    BusMessage,
    CommandMessage,
    InvalidationBatch,
    MalformedMessage,
    decode,
)

logger = logging.getLogger(__name__)


def subscriber_name(origin: str) -> str:
    """Return the Redis client name of a subscriber connection (CLIENT LIST)."""
    return "tomori-bus-sub-" + "".join(c if c.isalnum() else "-" for c in origin)


class RedisTransport:
    """Redis pub/sub for one process's bus."""

    def __init__(
        self,
        url: str,
        channel: str,
        *,
        origin: str,
        applier: Applier,
        runner: HandlerRunner,
        stats: BusStats,
    ) -> None:
        self.url = url
        self.channel = channel
        self.origin = origin
        self.stats = stats
        self.publisher = RedisPublisher(url, channel, stats)
        self.commands = RedisCommands(
            url, publisher=self.publisher, runner=runner, stats=stats
        )
        self._applier = applier
        self._rejected = Rejections(logger.warning, count=stats.incr)
        self._subscriber: RedisSubscriber | None = None
        self._subscribed_before = False

    @property
    def subscriber_name(self) -> str:
        """Return the Redis client name of the subscriber connection (CLIENT LIST)."""
        return subscriber_name(self.origin)

    @property
    def subscribed(self) -> bool:
        """Return whether a subscriber runs (connected or reconnecting)."""
        return self._subscriber is not None

    def publish_later(self, build: Callable[[int], BusMessage]) -> None:
        """Queue the message `build(seq)`; the sender thread publishes it."""
        self.publisher.publish_later(build)

    def subscribe(self) -> None:
        """Start receiving (a thread that reconnects by itself)."""
        if self._subscriber is None:
            self._subscriber = RedisSubscriber(
                self.url,
                self.channel,
                on_subscribed=self._on_subscribed,
                on_message=self._on_message,
                on_lost=self._on_lost,
                name=self.subscriber_name,
            )
            self._subscriber.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop receiving and answering commands (joining the subscriber)."""
        if self._subscriber is not None:
            self._subscriber.stop(timeout)
            self._subscriber = None
        self.commands.stop()

    def close(self, *, drain_timeout: float) -> None:
        """Publish any backlog (up to `drain_timeout` s) and disconnect."""
        self.publisher.close(drain_timeout=drain_timeout)
        self.commands.close()

    # ------------------------------------------------------------ receiving

    def _on_subscribed(self) -> None:
        reason = "reconnected" if self._subscribed_before else "subscribed"
        self._subscribed_before = True
        self._applier.forget_sequences()
        self.stats.set_connected(True)
        # It cannot know what it missed while not subscribed: the outbox does.
        self._applier.recover(reason)

    def _on_lost(self, exc: Exception) -> None:
        if self.stats.connected:
            logger.warning(
                "bus: subscription to %s lost (%s); reconnecting", self.channel, exc
            )
        self.stats.set_connected(False)
        self.stats.incr("disconnects")

    def _on_message(self, data: Any) -> None:
        self.stats.incr("received")
        try:
            message = decode(data)
        except MalformedMessage as exc:
            # Dropped, not applied: if it was an invalidation, the sequence gap
            # it leaves sends this process to the outbox.
            self._rejected.note(
                "dropped a malformed message:", exc.kind, str(exc), counter="rejected"
            )
            return
        if message.origin == self.origin:
            self.stats.incr("own_skipped")
            return
        if isinstance(message, CommandMessage):
            self.commands.submit_answer(message)
        elif isinstance(message, InvalidationBatch):
            self._applier.batch(message)
