"""One bot worker per shard: a lock that a second `runbot` on the same shard cannot take.

With Redis the lock is a key with an expiry (`SHARD_LOCK_TTL_SECONDS`, "the
TTL") that the holder keeps renewing, so it spans machines and frees itself
when a worker dies. Its value names the holder (token, worker id, host, pid)
so a refusal says who holds the shard; renew and release compare that exact
value. Without Redis it is an flock on a file under var/locks, which the
kernel releases when the process exits.

Renewal (every TTL/3) has four outcomes, and the worker acts on each:
- held: the key is ours; extended.
- retaken: the key was gone (Redis restarted or was flushed) and free, so it
  was set again with our value (SET-if-absent, in the same script).
- taken: another worker holds the key. This worker stops serving: it closes
  its gateway session and exits non-zero with an ERROR naming the shard, the
  key and the holder.
- unreachable: Redis did not answer. That is not "lost": the key may still
  be ours until a TTL after the start of the last successful renewal, so the
  worker keeps serving and retries every second or so. Once a whole TTL has
  passed with Redis unreachable, another worker may hold the shard: this
  worker closes its gateway and exits non-zero (a supervisor restarts it, and
  `runbot --wait-for-lock` then waits for the lock instead of refusing).
A worker that has just taken a Redis lock connects only half a TTL after
taking it: a previous holder whose key vanished (Redis restart) renews within
a third of a TTL, finds the key taken and closes its gateway first. Not
covered: a double fault (Redis loses the key while the previous holder is cut
off from Redis) or a process frozen for longer than a TTL; a lease cannot
fence those without the gateway's help.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from caches.core.periodic import wait_or_stop
from tomori.bot.lock.backends import (
    LockState,
    LockTiming,
    OneLock,
    Renewal,
    ShardLockError,
    holder_value,
)

__all__ = [
    "LockState",
    "LockTiming",
    "Renewal",
    "ShardLock",
    "ShardLockError",
    "Verdict",
    "lock_names",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    """Whether the worker may go on serving, and when to renew next."""

    serving: bool
    next_in: float
    reason: str = ""


def lock_names(shard_ids: list[int] | None) -> list[str]:
    """Return one lock name per shard (or the unsharded bot's one).

    A lock per shard id, not per set: `--shard-ids 0,1` and `--shard-ids 0`
    overlap on shard 0 and must not run together.
    """
    if not shard_ids:
        return ["runbot-unsharded"]
    return [f"runbot-shard-{shard_id}" for shard_id in sorted(set(shard_ids))]


class ShardLock:
    """Hold a worker's shard locks (all or none) for its lifetime."""

    def __init__(
        self,
        names: list[str],
        *,
        owner: str = "",
        timing: LockTiming | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timing = timing or LockTiming.from_settings()
        self.clock = clock
        value = holder_value(owner or f"{socket.gethostname()}:{os.getpid()}")
        self.locks = [OneLock(name, value, self.timing) for name in names]
        self.held_at = 0.0  # start of the last round that found every lock ours
        self.connect_at = 0.0  # when a newly taken lock lets the worker connect
        self._outage_since: float | None = None

    def acquire(self) -> None:
        """Take every lock, or none and raise ShardLockError naming the holder."""
        started = self.clock()
        taken: list[OneLock] = []
        try:
            for lock in self.locks:
                lock.acquire()
                taken.append(lock)
        except ShardLockError:
            for lock in taken:
                lock.release()
            raise
        self.held_at = started
        uses_redis = any(lock.uses_redis for lock in self.locks)
        self.connect_at = started + (self.timing.handover if uses_redis else 0.0)
        logger.info("took the shard lock: %s", ", ".join(lock.where for lock in taken))

    async def take(self, *, wait: bool, stop: asyncio.Event) -> bool:
        """Acquire; with `wait`, retry until free or `stop` is set (then False)."""
        waiting = False
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.acquire)
                return True
            except ShardLockError as exc:
                if not wait:
                    raise
                if not waiting:
                    logger.warning("waiting for the shard lock: %s", exc)
                    waiting = True
            await wait_or_stop(stop, self.timing.retry_every)
        return False

    def renew(self) -> list[Renewal]:
        """Renew every lock (re-taking a vanished one); report each outcome."""
        return [lock.renew() for lock in self.locks]

    def keep(self) -> Verdict:
        """Renew, and decide whether this worker may still serve its shards."""
        started = self.clock()
        renewals = self.renew()
        for renewal in renewals:
            if renewal.state is LockState.TAKEN:
                return Verdict(False, 0.0, _taken_reason(renewal))
        failed = [r for r in renewals if r.state is LockState.UNREACHABLE]
        if failed:
            return self._unreachable(failed[0])
        if self._outage_since is not None:
            logger.info(
                "shard lock renewed again after %.1fs", started - self._outage_since
            )
            self._outage_since = None
        self.held_at = started
        return Verdict(True, self.timing.renew_every)

    def _unreachable(self, renewal: Renewal) -> Verdict:
        now = self.clock()
        if self._outage_since is None:
            self._outage_since = now
            logger.warning(
                "could not renew the shard lock %s: %s; serving on while it may "
                "still be ours (%.1fs), retrying every %.1fs",
                renewal.where,
                renewal.detail,
                self.held_at + self.timing.ttl - now,
                self.timing.retry_every,
            )
        if now - self.held_at < self.timing.ttl:
            return Verdict(True, self.timing.retry_every)
        return Verdict(False, 0.0, _expired_reason(renewal, now - self.held_at))

    def release(self) -> None:
        """Give every lock back. Never raises."""
        for lock in self.locks:
            lock.release()


def _taken_reason(renewal: Renewal) -> str:
    return (
        f"lost the shard lock {renewal.name} ({renewal.where}): it is held by "
        f"{renewal.detail}"
    )


def _expired_reason(renewal: Renewal, elapsed: float) -> str:
    return (
        f"lost the shard lock {renewal.name} ({renewal.where}): Redis unreachable "
        f"for {elapsed:.1f}s, longer than the lock's TTL, so another worker may "
        f"hold it ({renewal.detail})"
    )
