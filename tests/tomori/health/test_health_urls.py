"""The admin's health URLs: liveness always, readiness naming the service that is down."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import Client

from caches import live
from caches.messages import WorkerSnapshot
from tests.support.faults import wait_until

LIVE = "/health/"
READY = "/health/ready/"

pytestmark = pytest.mark.django_db(transaction=True)


def _get(client: Client, url: str) -> tuple[int, dict[str, Any]]:
    response = client.get(url)
    assert response["Content-Type"] == "application/json"
    assert "no-cache" in response["Cache-Control"]
    return response.status_code, json.loads(response.content)


def _publish_worker() -> None:
    live.publish_snapshot(
        "w1:shard0", WorkerSnapshot(worker_id="w1:shard0", shard_ids=(0,))
    )


def test_ready_with_the_database_redis_and_a_live_worker(
    client: Client, own_redis, live_on
) -> None:  # type: ignore[no-untyped-def]
    live_on(own_redis.url)
    _publish_worker()
    status, body = _get(client, READY)
    assert status == 200 and body["status"] == "ready" and body["failing"] == []
    checks = body["checks"]
    assert checks["database"] == {"ok": True}
    assert checks["redis"] == {"ok": True, "configured": True}
    assert checks["workers"]["live"] == 1
    assert checks["workers"]["workers"][0]["worker_id"] == "w1:shard0"


def test_no_live_worker_is_not_ready_unless_none_is_required(
    client: Client, live_on, settings
) -> None:  # type: ignore[no-untyped-def]
    status, body = _get(client, READY)
    assert status == 503 and body["failing"] == ["workers"]
    assert body["checks"]["workers"] == {
        "ok": False,
        "required": 1,
        "live": 0,
        "workers": [],
    }
    assert body["checks"]["redis"] == {"ok": True, "configured": False}
    settings.HEALTH_MIN_LIVE_WORKERS = 0
    assert _get(client, READY)[0] == 200


def test_a_refused_database_fails_readiness_but_not_liveness(
    client: Client, proxied_database, live_on
) -> None:  # type: ignore[no-untyped-def]
    _publish_worker()
    assert _get(client, READY)[0] == 200  # through the proxy
    proxied_database.refuse()
    status, body = _get(client, READY)
    assert status == 503 and body["failing"] == ["database"]
    assert body["checks"]["database"]["error"].startswith("database unreachable: ")
    assert _get(client, LIVE) == (200, {"status": "ok"})
    proxied_database.forward()
    assert _get(client, READY)[0] == 200


def test_a_frozen_database_is_reported_within_the_timeout(
    client: Client, proxied_database, live_on, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.HEALTH_CHECK_TIMEOUT_SECONDS = 0.5
    _publish_worker()
    proxied_database.freeze()
    started = time.monotonic()
    status, body = _get(client, READY)
    assert time.monotonic() - started < 3
    assert status == 503
    assert "no answer within 0.5 s" in body["checks"]["database"]["error"]
    started = time.monotonic()
    status, body = _get(client, READY)  # the first check still waits: no second one
    assert time.monotonic() - started < 0.5
    assert "the previous check has waited" in body["checks"]["database"]["error"]
    proxied_database.forward()
    assert wait_until(lambda: _get(client, READY)[0] == 200, timeout=10)


def test_a_dead_redis_fails_readiness_naming_it(
    client: Client, own_redis, live_on
) -> None:  # type: ignore[no-untyped-def]
    live_on(own_redis.url)
    _publish_worker()
    own_redis.kill()
    status, body = _get(client, READY)
    assert status == 503 and body["failing"] == ["redis", "workers"]
    where = f"redis://127.0.0.1:{own_redis.port}/0"
    assert body["checks"]["redis"]["error"].startswith(f"Redis unreachable at {where}")
    assert body["checks"]["workers"]["error"].startswith(
        f"Redis unreachable at {where}"
    )
    assert _get(client, LIVE)[0] == 200


def test_a_paused_redis_is_reported_within_seconds(
    client: Client, own_redis, live_on, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.HEALTH_CHECK_TIMEOUT_SECONDS = 0.5
    live_on(own_redis.url)
    _publish_worker()
    own_redis.pause()
    try:
        started = time.monotonic()
        status, body = _get(client, READY)
        elapsed = time.monotonic() - started
    finally:
        own_redis.resume()
    assert status == 503 and "redis" in body["failing"]
    assert elapsed < 4  # PING waits 0.5 s, the snapshot read its own 2 s


def test_health_urls_take_no_post(client: Client) -> None:
    assert client.post(READY).status_code == 405
    assert client.head(LIVE).status_code == 200
