"""The two kinds of shard lock: a Redis key with an expiry, an flock on a file."""

from __future__ import annotations

import enum
import fcntl
import json
import logging
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from tomori.domain.knobs import knobs

logger = logging.getLogger(__name__)

# 1: extended; 2: was gone and is set again; a string: the other holder's value.
_RENEW = """
local value = redis.call('get', KEYS[1])
if value == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
if not value then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return value
"""
_RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end"
)


class ShardLockError(RuntimeError):
    """Another worker already runs this shard (or Redis cannot say who does)."""


class LockState(enum.Enum):
    HELD = "held"
    RETAKEN = "retaken"
    TAKEN = "taken"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class Renewal:
    """The outcome of renewing one lock; `detail` names the holder or the error."""

    name: str
    where: str
    state: LockState
    detail: str = ""


@dataclass(frozen=True)
class LockTiming:
    """The lock's TTL and the intervals derived from it."""

    ttl: float

    @classmethod
    def from_settings(cls) -> LockTiming:
        return cls(ttl=float(knobs().SHARD_LOCK_TTL_SECONDS))

    @property
    def renew_every(self) -> float:
        return self.ttl / 3

    @property
    def retry_every(self) -> float:
        return min(1.0, self.ttl / 10)

    @property
    def redis_timeout(self) -> float:
        return min(2.0, self.ttl / 6)

    @property
    def handover(self) -> float:
        return self.ttl / 2


def holder_value(owner: str) -> str:
    """Return a fresh lock value: a unique token plus who holds the lock."""
    holder = {
        "token": uuid.uuid4().hex,
        "worker": owner,
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    return json.dumps(holder, sort_keys=True, separators=(",", ":"))


def describe_holder(value: bytes | str) -> str:
    """Return "worker W (pid P on H)" for a lock value, or the raw value."""
    text = value.decode(errors="replace") if isinstance(value, bytes) else value
    try:
        data = json.loads(text)
        return f"worker {data['worker']} (pid {data['pid']} on {data['host']})"
    except (ValueError, KeyError, TypeError):
        return repr(text[:120]) if text.strip() else "an unknown process"


class OneLock:
    """One named lock: a Redis key with an expiry, or an flock on a file."""

    def __init__(self, name: str, value: str, timing: LockTiming) -> None:
        self.name = name
        self.value = value
        self.timing = timing
        self.uses_redis = bool(settings.REDIS_URL)
        self._file: IO[str] | None = None
        self._redis: Any = None

    @property
    def where(self) -> str:
        if self.uses_redis:
            return f"Redis key {self._key}"
        return f"file {self._path}"

    def acquire(self) -> None:
        if self.uses_redis:
            self._acquire_redis()
        else:
            self._acquire_file()

    def renew(self) -> Renewal:
        """Extend a Redis lock, re-taking it if it vanished; file locks need nothing."""
        if self._redis is None:
            return Renewal(self.name, self.where, LockState.HELD)
        try:
            result = self._redis.eval(_RENEW, 1, self._key, self.value, self._ttl_ms)
        except Exception as exc:  # noqa: BLE001 (a Redis blip must not stop the bot)
            return Renewal(self.name, self.where, LockState.UNREACHABLE, str(exc))
        if result == 1:
            return Renewal(self.name, self.where, LockState.HELD)
        if result == 2:
            logger.warning(
                "the shard lock %s was gone (Redis restarted or flushed?); took it back",
                self.where,
            )
            return Renewal(self.name, self.where, LockState.RETAKEN)
        holder = describe_holder(result)
        return Renewal(self.name, self.where, LockState.TAKEN, holder)

    def release(self) -> None:
        """Give the lock back. Never raises."""
        if self._redis is not None:
            try:
                self._redis.eval(_RELEASE, 1, self._key, self.value)
            except Exception as exc:  # noqa: BLE001
                logger.warning("could not release the shard lock: %s", exc)
            self._redis.close()
            self._redis = None
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    @property
    def _key(self) -> str:
        # Namespaced by the bus channel: deployments sharing a Redis don't collide.
        return f"{settings.TOMORI_BUS_CHANNEL}:lock:{self.name}"

    @property
    def _path(self) -> Path:
        return Path(settings.VAR_DIR) / "locks" / f"{self.name}.lock"

    @property
    def _ttl_ms(self) -> int:
        return int(self.timing.ttl * 1000)

    def _acquire_redis(self) -> None:
        import redis

        timeout = self.timing.redis_timeout
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        try:
            taken = client.set(self._key, self.value, nx=True, px=self._ttl_ms)
            holder = None if taken else client.get(self._key)
        except redis.RedisError as exc:
            client.close()
            raise ShardLockError(
                f"cannot take the shard lock {self.name}: Redis is unreachable ({exc})"
            ) from None
        if not taken:
            client.close()
            raise ShardLockError(self._refusal(describe_holder(holder or b"")))
        self._redis = client

    def _acquire_file(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self._path, "a+")  # noqa: SIM115 (held open)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = describe_holder(handle.read().strip())
            handle.close()
            raise ShardLockError(self._refusal(holder)) from None
        handle.seek(0)
        handle.truncate()
        handle.write(self.value)
        handle.flush()
        self._file = handle

    def _refusal(self, holder: str) -> str:
        return (
            f"another runbot already holds {self.name} ({self.where}): {holder}; "
            "stop it first, or run with --wait-for-lock"
        )
