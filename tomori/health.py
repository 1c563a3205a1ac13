"""Health URLs of the admin web: liveness `/health/` and readiness `/health/ready/`.

Liveness answers 200 whenever the process serves requests: a database or
Redis outage must not get the admin restarted. Readiness checks the
database, Redis (when REDIS_URL is set) and that at least
HEALTH_MIN_LIVE_WORKERS bot workers publish live snapshots, and answers 503
naming what failed. Each service check is bounded by
HEALTH_CHECK_TIMEOUT_SECONDS; a database that does not answer keeps at most
one probe thread waiting, and later probes report it at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import redis
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from caches.live import LiveDataUnavailable, live_snapshots
from caches.operations.faults import MAX_ERROR_CHARS, database_fault
from tomori.domain.knobs import knobs
from tomori.domain.repositories.health import probe_database
from tomori.domain.service_urls import describe_redis_url

Check = dict[str, Any]


class BoundedCheck:
    """Run one blocking check on its own thread, waiting at most a timeout for it."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"health-{name}")
        self._lock = threading.Lock()
        self._running: Future[None] | None = None
        self._since = 0.0

    def run(self, fn: Callable[[], None], *, timeout: float) -> BaseException | None:
        """Return the error `fn` raised, TimeoutError if it did not answer, else None."""
        with self._lock:
            if self._running is not None and not self._running.done():
                waited = time.monotonic() - self._since
                return TimeoutError(f"the previous check has waited {waited:.0f} s")
            self._running = future = self._executor.submit(fn)
            self._since = time.monotonic()
        try:
            future.result(timeout)
        except FutureTimeout:
            return TimeoutError(f"no answer within {timeout:g} s")
        except Exception as exc:  # noqa: BLE001 (the error is the check's answer)
            return exc
        return None


_database = BoundedCheck("database")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:MAX_ERROR_CHARS] or type(exc).__name__


def check_database() -> Check:
    """Return whether the default database answers `SELECT 1`."""
    error = _database.run(probe_database, timeout=knobs().HEALTH_CHECK_TIMEOUT_SECONDS)
    if error is None:
        return {"ok": True}
    return {"ok": False, "error": database_fault(error)}


def check_redis() -> Check:
    """Return whether Redis answers PING (ok, and not configured, without REDIS_URL)."""
    url = settings.REDIS_URL
    if not url:
        return {"ok": True, "configured": False}
    timeout = knobs().HEALTH_CHECK_TIMEOUT_SECONDS
    client = redis.Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout
    )
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        where = describe_redis_url(url)
        return {"ok": False, "error": f"Redis unreachable at {where}: {_one_line(exc)}"}
    finally:
        client.close()
    return {"ok": True, "configured": True}


def check_workers() -> Check:
    """Return the live bot workers, ok when there are HEALTH_MIN_LIVE_WORKERS or more."""
    required = knobs().HEALTH_MIN_LIVE_WORKERS
    try:
        snapshots = live_snapshots()
    except LiveDataUnavailable as exc:
        return {"ok": required == 0, "required": required, "error": str(exc)}
    now = time.time()
    workers = [
        {
            "worker_id": snap.worker_id,
            "shard_ids": None if snap.shard_ids is None else list(snap.shard_ids),
            "age_s": round(now - (snap.published_at or now), 1),
        }
        for snap in snapshots
    ]
    ok = len(workers) >= required
    return {"ok": ok, "required": required, "live": len(workers), "workers": workers}


@never_cache
@require_safe
def liveness(request: HttpRequest) -> JsonResponse:
    """Answer 200 while the admin process serves requests."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_safe
def readiness(request: HttpRequest) -> JsonResponse:
    """Answer 200 when the database, Redis and enough workers are up, else 503."""
    checks = {
        "database": check_database(),
        "redis": check_redis(),
        "workers": check_workers(),
    }
    failing = [name for name, check in checks.items() if not check["ok"]]
    body = {
        "status": "not ready" if failing else "ready",
        "failing": failing,
        "checks": checks,
    }
    return JsonResponse(body, status=503 if failing else 200)
