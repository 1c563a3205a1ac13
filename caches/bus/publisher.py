"""Publish bus messages to Redis, keeping order and never failing the caller's write.

Sequence numbers are assigned and published under one lock, so a process's
messages reach subscribers in sequence order. A message that cannot be
published waits in a bounded backlog that a background thread retries; one
that overflows it is dropped, which subscribers see as a sequence gap (and
answer by clearing their caches).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from caches.bus.messages import encode
from caches.bus.stats import BusStats

logger = logging.getLogger(__name__)

BACKLOG_MAX = 10_000
RETRY_MAX_DELAY = 2.0


def redis_client(
    url: str, *, socket_timeout: float | None = 2.0, name: str | None = None
) -> redis.Redis:
    """Return a client that fails fast (no retries: the caller decides)."""
    return redis.Redis.from_url(
        url,
        client_name=name,
        socket_connect_timeout=1.0,
        socket_timeout=socket_timeout,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=30,
    )


class RedisPublisher:
    """Sequence-numbered publishing to one channel with an ordered retry backlog."""

    def __init__(self, url: str, channel: str, stats: BusStats) -> None:
        self.channel = channel
        self.client = redis_client(url)
        self._stats = stats
        self._lock = threading.Lock()
        self._seq = 0
        self._backlog: deque[str] = deque()
        self._down = False
        self._retrier: threading.Thread | None = None
        self._closed = threading.Event()
        self._exit_hook = False

    def publish(self, build: Callable[[int], dict[str, Any]]) -> int | None:
        """Publish the message `build(seq)`; return its receivers, None if deferred."""
        with self._lock:
            self._seq += 1
            data = encode(build(self._seq))
            if self._backlog:
                self._enqueue(data)  # behind older messages, to keep the order
                return None
            try:
                receivers = self.client.publish(self.channel, data)
            except redis.RedisError as exc:
                self._stats.incr("publish_failures")
                self._note_down(exc)
                self._enqueue(data)
                return None
            self._note_up()
            self._stats.incr("published")
            return int(receivers)

    @property
    def backlog(self) -> int:
        """Return how many messages wait to be published."""
        return len(self._backlog)

    def drain(self, timeout: float = 5.0) -> bool:
        """Try for up to `timeout` seconds to publish the backlog; return if it emptied."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._drain():
                    return True
            self._closed.wait(0.1)
        return not self._backlog

    def _drain_at_exit(self, timeout: float = 5.0) -> None:
        # A process that exits with a backlog would lose those invalidations
        # for good: no later message from it would reveal the gap.
        if self._backlog and not self.drain(timeout):
            logger.error(
                "bus: exiting with %d unpublished invalidation message(s); "
                "other processes may serve stale entries until their TTL",
                len(self._backlog),
            )

    def close(self, *, drain_timeout: float = 5.0) -> None:
        """Publish what is left (up to `drain_timeout` s), stop retrying, disconnect."""
        self._drain_at_exit(drain_timeout)
        atexit.unregister(self._drain_at_exit)
        self._closed.set()
        retrier = self._retrier
        if retrier is not None:
            retrier.join(timeout=5)
        self.client.close()

    def _enqueue(self, data: str) -> None:
        if len(self._backlog) >= BACKLOG_MAX:
            self._backlog.popleft()
            self._stats.incr("backlog_dropped")
        self._backlog.append(data)
        if not self._exit_hook:
            self._exit_hook = True
            atexit.register(self._drain_at_exit)
        if self._retrier is None and not self._closed.is_set():
            self._retrier = threading.Thread(
                target=self._retry_loop, name="tomori-bus-publish-retry", daemon=True
            )
            self._retrier.start()

    def _retry_loop(self) -> None:
        delay = 0.05
        while not self._closed.wait(delay):
            with self._lock:
                if self._drain():
                    self._retrier = None
                    return
            delay = min(delay * 2, RETRY_MAX_DELAY)

    def _drain(self) -> bool:
        while self._backlog:
            try:
                self.client.publish(self.channel, self._backlog[0])
            except redis.RedisError as exc:
                self._note_down(exc)
                return False
            self._backlog.popleft()
            self._stats.incr("published")
        self._note_up()
        return True

    def _note_down(self, exc: Exception) -> None:
        if not self._down:
            self._down = True
            logger.warning(
                "bus: cannot publish to Redis (%s); writes still commit, "
                "messages wait in a backlog and subscribers flush on reconnect",
                exc,
            )

    def _note_up(self) -> None:
        if self._down:
            self._down = False
            logger.warning("bus: publishing to Redis again")
