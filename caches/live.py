"""Live worker snapshots: each bot worker publishes its registry state for the admin.

With Redis, a worker writes `<bus channel>:worker:<id>` with an expiry a few times
the publish interval, so a worker that dies disappears from the dashboard on
its own. Without Redis (the embedded default, admin and worker in one
process) the snapshot is kept in this module.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from typing import Any

import redis
from django.conf import settings

from caches.core import finite_json
from caches.messages import MalformedMessage, WorkerSnapshot
from tomori.domain.knobs import knobs
from tomori.domain.service_urls import describe_redis_url

logger = logging.getLogger(__name__)

# Empty: namespaced by the bus channel, so deployments sharing a Redis stay apart.
KEY_PREFIX = ""
_local: dict[str, tuple[float, WorkerSnapshot]] = {}
_local_lock = threading.Lock()
_redis_client: Any = None


class LiveDataUnavailable(Exception):
    """The live snapshots cannot be read (Redis unreachable); the message says why."""


def key_prefix() -> str:
    """Return the Redis key prefix of worker snapshots."""
    return KEY_PREFIX or f"{settings.TOMORI_BUS_CHANNEL}:worker:"


def snapshot_ttl_seconds() -> float:
    """Return how long a published snapshot counts as live."""
    return max(3 * knobs().WORKER_SNAPSHOT_INTERVAL_SECONDS, 5.0)


def _redis() -> Any:
    global _redis_client
    if _redis_client is None:
        _redis_client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2
        )
    return _redis_client


def publish_snapshot(worker_id: str, snapshot: WorkerSnapshot) -> bool:
    """Publish one worker's snapshot; return whether it was stored. Never raises."""
    payload = dataclasses.replace(snapshot, worker_id=worker_id).published()
    ttl = snapshot_ttl_seconds()
    if not settings.REDIS_URL:
        with _local_lock:
            _local[worker_id] = (time.monotonic() + ttl, payload)
        return True
    try:
        _redis().set(
            key_prefix() + worker_id,
            finite_json.dumps(payload.to_json(), default=str),
            px=int(ttl * 1000),
        )
    except Exception as exc:  # noqa: BLE001 (a dashboard feed must not break the worker)
        logger.warning("could not publish the worker snapshot: %s", exc)
        return False
    return True


def withdraw_snapshot(worker_id: str) -> None:
    """Remove a worker's snapshot (clean shutdown). Never raises."""
    with _local_lock:
        _local.pop(worker_id, None)
    if settings.REDIS_URL:
        try:
            _redis().delete(key_prefix() + worker_id)
        except Exception as exc:  # noqa: BLE001
            logger.warning("could not withdraw the worker snapshot: %s", exc)


def live_snapshots() -> list[WorkerSnapshot]:
    """Return the snapshots of every live worker, sorted by worker id.

    Raises LiveDataUnavailable when Redis cannot be read.
    """
    if not settings.REDIS_URL:
        now = time.monotonic()
        with _local_lock:
            for worker_id in [w for w, (exp, _) in _local.items() if exp <= now]:
                del _local[worker_id]
            found = [snap for _, snap in _local.values()]
        return sorted(found, key=lambda s: s.worker_id)
    try:
        client = _redis()
        keys = sorted(client.scan_iter(match=key_prefix() + "*", count=100))
        values = client.mget(keys) if keys else []
    except (redis.RedisError, OSError) as exc:
        where = describe_redis_url(settings.REDIS_URL)
        raise LiveDataUnavailable(f"Redis unreachable at {where}: {exc}") from exc
    return [snap for snap in map(_decode, values) if snap is not None]


def _decode(value: bytes | None) -> WorkerSnapshot | None:
    if value is None:
        return None
    try:
        return WorkerSnapshot.from_json(json.loads(value))
    except (ValueError, MalformedMessage) as exc:
        # One corrupt key must not hide every other worker.
        logger.warning("dropped a malformed worker snapshot: %s", exc)
        return None


def reset_for_tests() -> None:
    """Forget local snapshots and the Redis client (settings may have changed)."""
    global _redis_client
    with _local_lock:
        _local.clear()
    _redis_client = None
