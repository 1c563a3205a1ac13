"""A background thread that listens on the bus channel, checks the connection is alive, and reconnects.

A subscriber that only reads cannot tell a quiet channel from a dead, paused
(SIGSTOP) or half-open connection: no error ever arrives. So it PINGs on the
subscribed connection every `ping_interval` seconds and treats a PONG (or a
subscription confirmation) missing for `liveness_timeout` seconds as a lost
connection: it reconnects with back-off, and its owner catches up on what it
missed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from caches.bus.publisher import redis_client

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.2
BACKOFF_START = 0.05
BACKOFF_MAX = 5.0
PING_INTERVAL = 1.0
LIVENESS_TIMEOUT = 3.0
_PING_BODY = "tomori-liveness"


class ConnectionDead(redis.ConnectionError):
    """The subscribed connection stopped answering PINGs."""


class RedisSubscriber:
    """Deliver every message on `channel`; report each (re)subscription and each loss.

    `on_subscribed` runs whenever Redis confirms the subscription, including
    after a reconnect, so the owner can catch up on what it may have missed.
    """

    def __init__(
        self,
        url: str,
        channel: str,
        *,
        on_subscribed: Callable[[], None],
        on_message: Callable[[Any], None],
        on_lost: Callable[[Exception], None],
        name: str | None = None,
        ping_interval: float = PING_INTERVAL,
        liveness_timeout: float = LIVENESS_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.name = name
        self.channel = channel
        self._on_subscribed = on_subscribed
        self._on_message = on_message
        self._on_lost = on_lost
        self._ping_interval = ping_interval
        self._liveness_timeout = liveness_timeout
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backoff = BACKOFF_START
        self._last_heard = 0.0
        self._last_ping = 0.0

    def start(self) -> None:
        """Start listening in a daemon thread."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, name="tomori-bus-subscriber", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening and join the thread (it wakes at least every POLL_SECONDS)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        """Return whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
                return
            except (redis.RedisError, OSError) as exc:
                self._on_lost(exc)
            self._stop.wait(self._backoff)
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)

    def _listen(self) -> None:
        # Reads time out too: a read that never returns would hide a dead link.
        client = redis_client(
            self.url, socket_timeout=self._liveness_timeout, name=self.name
        )
        pubsub = client.pubsub()
        try:
            self._last_heard = self._last_ping = self._clock()
            pubsub.subscribe(self.channel)
            while not self._stop.is_set():
                message = pubsub.get_message(timeout=POLL_SECONDS)
                if message is not None:
                    self._last_heard = self._clock()
                    self._handle(message)
                self._check_alive(pubsub)
        finally:
            pubsub.close()
            client.close()

    def _check_alive(self, pubsub: Any) -> None:
        now = self._clock()
        if now - self._last_heard > self._liveness_timeout:
            raise ConnectionDead(
                f"no answer from Redis for {now - self._last_heard:.1f} s"
            )
        if now - self._last_ping >= self._ping_interval:
            self._last_ping = now
            pubsub.ping(_PING_BODY)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        try:
            if kind == "subscribe":
                self._backoff = BACKOFF_START
                self._on_subscribed()
            elif kind == "message":
                self._on_message(message["data"])
        except Exception:
            # One bad message or callback must not end the subscription.
            logger.exception("bus: error handling a %s message", kind)
