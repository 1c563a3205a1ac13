"""Publish bus messages to Redis without ever making the writer wait for Redis.

Invalidations are queued and sent by one sender thread, in sequence order, so
a commit never blocks on a slow, paused or unreachable Redis. A message the
sender cannot publish waits in a bounded backlog that it retries with
back-off; one that overflows it is dropped, which subscribers see as a
sequence gap. Neither loses an invalidation: every committed write is also in
the outbox (`caches.outbox`), which every worker reads. Operator commands are
published synchronously (their sender waits for replies anyway) and carry no
sequence number.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import deque
from collections.abc import Callable

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from caches.bus.stats import BusStats
from caches.messages import BusMessage, encode

logger = logging.getLogger(__name__)

BACKLOG_MAX = 10_000
RETRY_MAX_DELAY = 2.0
#: How long an exiting process keeps trying to publish what it queued.
EXIT_DRAIN_SECONDS = 1.0


def redis_client(
    url: str, *, socket_timeout: float | None = 2.0, name: str | None = None
) -> redis.Redis:
    """Return a client that fails fast (no retries: the caller decides)."""
    return redis.Redis.from_url(
        url,
        client_name=name,
        socket_connect_timeout=1.0,
        socket_timeout=socket_timeout,
        socket_keepalive=True,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=30,
    )


class RedisPublisher:
    """Sequence-numbered publishing to one channel from a sender thread."""

    def __init__(self, url: str, channel: str, stats: BusStats) -> None:
        self.channel = channel
        self.client = redis_client(url)
        self._stats = stats
        self._lock = threading.Lock()
        self._seq = 0
        self._backlog: deque[str] = deque()
        #: Taken off the backlog by the sender and not yet published (0 or 1).
        self._in_flight = 0
        self._down = False
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._closed = threading.Event()
        self._sender: threading.Thread | None = None

    def publish_later(self, build: Callable[[int], BusMessage]) -> None:
        """Queue the message `build(seq)` for the sender thread; never blocks on Redis."""
        with self._lock:
            self._seq += 1
            if len(self._backlog) >= BACKLOG_MAX:
                self._backlog.popleft()
                self._stats.incr("backlog_dropped")
            self._backlog.append(encode(build(self._seq)))
            self._idle.clear()
            if self._sender is None and not self._closed.is_set():
                self._start_sender()
        self._wake.set()

    def publish(self, build: Callable[[int], BusMessage]) -> int | None:
        """Publish `build(0)` now; return its receivers, or None when Redis failed."""
        try:
            receivers = self.client.publish(self.channel, encode(build(0)))
        except redis.RedisError as exc:
            self._stats.incr("publish_failures")
            self._note_down(exc)
            return None
        self._stats.incr("published")
        return int(receivers)

    @property
    def backlog(self) -> int:
        """Return how many messages wait to be published."""
        return len(self._backlog)

    @property
    def unpublished(self) -> int:
        """Return how many queued messages are not published yet (in flight too)."""
        with self._lock:
            return len(self._backlog) + self._in_flight

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait up to `timeout` s for the sender to publish the backlog; return if it did."""
        self._wake.set()
        return self._idle.wait(timeout)

    def close(self, *, drain_timeout: float = EXIT_DRAIN_SECONDS) -> None:
        """Publish what is left (up to `drain_timeout` s), stop the sender, disconnect."""
        self._drain_at_exit(drain_timeout)
        atexit.unregister(self._drain_at_exit)
        self._closed.set()
        self._wake.set()
        sender = self._sender
        if sender is not None:
            sender.join(timeout=5)
        self.client.close()

    def _drain_at_exit(self, timeout: float = EXIT_DRAIN_SECONDS) -> None:
        # `_idle` is clear from the queueing of a message until the sender has
        # published it: a message taken off the backlog is waited for too.
        if self._idle.is_set() or self.drain(timeout):
            return
        logger.warning(
            "bus: exiting with %d unpublished invalidation message(s); "
            "workers catch them up from the outbox",
            self.unpublished,
        )

    def _start_sender(self) -> None:
        atexit.register(self._drain_at_exit)
        self._sender = threading.Thread(
            target=self._send_loop, name="tomori-bus-publisher", daemon=True
        )
        self._sender.start()

    def _send_loop(self) -> None:
        delay = 0.0
        while not self._closed.is_set():
            if delay:
                self._closed.wait(delay)
            else:
                self._wake.wait()
            self._wake.clear()
            sent = self._drain()
            delay = 0.0 if sent else min(max(delay * 2, 0.05), RETRY_MAX_DELAY)

    def _drain(self) -> bool:
        while True:
            with self._lock:
                if not self._backlog:
                    self._idle.set()
                    self._note_up()
                    return True
                data = self._backlog.popleft()
                self._in_flight = 1
            try:
                self.client.publish(self.channel, data)
            except redis.RedisError as exc:
                with self._lock:
                    self._backlog.appendleft(data)  # first again, to keep the order
                    self._in_flight = 0
                self._stats.incr("publish_failures")
                self._note_down(exc)
                return False
            with self._lock:
                self._in_flight = 0
            self._stats.incr("published")

    def _note_down(self, exc: Exception) -> None:
        if not self._down:
            self._down = True
            logger.warning(
                "bus: cannot publish to Redis (%s); writes still commit, "
                "and workers catch up from the outbox",
                exc,
            )

    def _note_up(self) -> None:
        if self._down:
            self._down = False
            logger.warning("bus: publishing to Redis again")
