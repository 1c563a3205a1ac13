"""Suite-wide fixtures: services, the cache registry, a fake clock."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from caches.core import FakeClock  # Django-free: safe before settings load

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_service(name: str, reason: str) -> None:
    """Skip locally when a service is missing; in CI a missing service is a failure."""
    if IN_CI:
        pytest.fail(f"{name} is required in CI: {reason}")
    pytest.skip(f"{name} unavailable: {reason}")


@pytest.fixture
def redis_url() -> str:
    """Return the Redis URL of the test suite, proving Redis answers."""
    from django.conf import settings

    url = settings.REDIS_URL
    if not url:
        require_service("Redis", "REDIS_URL is not set")
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        require_service("Redis", str(exc))
    return url


@pytest.fixture
def postgres() -> None:
    """Require the suite to run on PostgreSQL."""
    from django.db import connection

    if connection.vendor != "postgresql":
        require_service("PostgreSQL", f"DATABASE_URL points at {connection.vendor}")


@pytest.fixture
def fake_clock() -> FakeClock:
    """Return a manual monotonic clock starting at t=1000 s."""
    return FakeClock(start=1000.0)


@pytest.fixture(autouse=True)
def fresh_cache_registry() -> Iterator[None]:
    """Give every test freshly built caches: empty, zeroed stats, real clocks.

    The one registry reset of the suite: every layer is rebuilt from the
    current settings, and whatever a test registered by hand is dropped.
    """
    from caches.layers import build_registry

    build_registry()
    yield


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):  # type: ignore[no-untyped-def]
    """Drop leftover sessions (sync_to_async threads, subprocesses) before teardown."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture
def own_redis() -> Iterator[object]:
    """Start a redis-server of this test's own (free port) that it may kill or pause."""
    from tests.support.faults import OwnRedis

    server = OwnRedis().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_proxy() -> Iterator[object]:
    """Start a TCP proxy in front of the suite's PostgreSQL that the test may break."""
    from django.conf import settings

    from tests.support.faults import TcpProxy

    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        require_service("PostgreSQL", "the proxy needs a PostgreSQL DATABASE_URL")
    proxy = TcpProxy(db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432)).start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def proxied_database(pg_proxy) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """Route the default connection (every thread's) through `pg_proxy`, restored after."""
    from django.db import connections

    conn = connections["default"]
    saved = (conn.settings_dict["HOST"], conn.settings_dict["PORT"])
    conn.close()
    conn.settings_dict["HOST"], conn.settings_dict["PORT"] = "127.0.0.1", pg_proxy.port
    try:
        yield pg_proxy
    finally:
        pg_proxy.forward()
        conn.close()
        conn.settings_dict["HOST"], conn.settings_dict["PORT"] = saved
