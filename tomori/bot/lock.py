"""One bot worker per shard: a lock that a second `runbot` on the same shard cannot take.

With Redis the lock is a key with an expiry that the holder keeps renewing, so
it spans machines and frees itself when a worker dies. Without Redis it is an
flock on a file under var/, which the kernel releases when the process exits.
"""

from __future__ import annotations

import fcntl
import logging
import os
import uuid
from pathlib import Path
from typing import IO, Any

from django.conf import settings

logger = logging.getLogger(__name__)

LOCK_TTL_MS = 30_000
_RENEW = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
)
_RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end"
)


class ShardLockError(RuntimeError):
    """Another worker already runs this shard."""


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

    def __init__(self, names: list[str]) -> None:
        self.locks = [_OneLock(name) for name in names]

    def acquire(self) -> None:
        """Take every lock, or none and raise ShardLockError naming the holder."""
        taken: list[_OneLock] = []
        try:
            for lock in self.locks:
                lock.acquire()
                taken.append(lock)
        except ShardLockError:
            for lock in taken:
                lock.release()
            raise

    def renew(self) -> bool:
        """Extend the Redis locks; return whether every one is still held."""
        return all([lock.renew() for lock in self.locks])

    def release(self) -> None:
        """Give every lock back. Never raises."""
        for lock in self.locks:
            lock.release()


class _OneLock:
    """One named lock: a Redis key with an expiry, or an flock on a file."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.token = uuid.uuid4().hex
        self._file: IO[str] | None = None
        self._redis: Any = None

    def acquire(self) -> None:
        if settings.REDIS_URL:
            self._acquire_redis()
        else:
            self._acquire_file()

    def renew(self) -> bool:
        """Extend a Redis lock (call well within LOCK_TTL_MS); file locks need nothing."""
        if self._redis is None:
            return True
        try:
            return bool(self._redis.eval(_RENEW, 1, self._key, self.token, LOCK_TTL_MS))
        except Exception as exc:  # noqa: BLE001 (a Redis blip must not stop the bot)
            logger.warning("could not renew the shard lock: %s", exc)
            return False

    def release(self) -> None:
        """Give the lock back. Never raises."""
        if self._redis is not None:
            try:
                self._redis.eval(_RELEASE, 1, self._key, self.token)
            except Exception as exc:  # noqa: BLE001
                logger.warning("could not release the shard lock: %s", exc)
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    @property
    def _key(self) -> str:
        # Namespaced by the bus channel: deployments sharing a Redis don't collide.
        return f"{settings.TOMORI_BUS_CHANNEL}:lock:{self.name}"

    def _acquire_redis(self) -> None:
        import redis

        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
        holder = f"{self.token}"
        if not client.set(self._key, holder, nx=True, px=LOCK_TTL_MS):
            raise ShardLockError(
                f"another runbot already holds {self.name} (Redis key {self._key}); "
                "stop it first or wait for its lock to expire"
            )
        self._redis = client

    def _acquire_file(self) -> None:
        directory = Path(settings.VAR_DIR) / "locks"
        directory.mkdir(parents=True, exist_ok=True)
        handle = open(directory / f"{self.name}.lock", "a+")  # noqa: SIM115 (held open)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise ShardLockError(
                f"another runbot already holds {self.name} (pid {holder})"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._file = handle
