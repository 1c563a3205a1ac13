"""Fixtures for the operator admin: a test cache, a bus worker on real Redis, users."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from caches import bus, live
from caches.catalogs.outcomes import RefreshOutcome
from caches.core import BoundedTTLCache
from caches.layers._support import parse_int
from caches.operations import (
    WorkerContext,
    build_worker_snapshot,
    ensure_layers_loaded,
    make_command_handler,
)
from caches.registry import EmergencyPolicy, registry

TEST_CACHE = "admin_test"
PASSWORD = "correct horse battery staple"


@pytest.fixture(autouse=True)
def _private_live_snapshots(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keep this test's worker snapshots apart from any other test run on the same Redis."""
    monkeypatch.setattr(live, "KEY_PREFIX", f"tomori:test-worker:{uuid.uuid4().hex}:")
    live.reset_for_tests()
    yield
    live.reset_for_tests()


@pytest.fixture(autouse=True)
def _no_metric_rows(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict]]:
    """Keep the emergency clear's metric off the database (a background thread)."""
    emitted: list[tuple[str, dict]] = []
    monkeypatch.setattr(
        "caches.memory.emergency.emit_metric",
        lambda name, fields, **_: emitted.append((name, fields)),
    )
    return emitted


@pytest.fixture
def test_cache() -> Iterator[BoundedTTLCache[int, str]]:
    """Register a small cache keyed by integer ids, filled with five entries."""
    cache: BoundedTTLCache[int, str] = BoundedTTLCache(TEST_CACHE, maxsize=10, ttl=600)
    registry.register(
        TEST_CACHE,
        cache,
        policy=EmergencyPolicy.CLEAR,
        description="A cache the admin tests fill.",
        key_help="an integer id, e.g. 42",
        parse_key=parse_int,
    )
    for key in range(1, 6):
        cache.set(key, f"value {key}")
    yield cache
    if TEST_CACHE in registry:
        registry.unregister(TEST_CACHE)


@dataclass
class FakeCatalog:
    """A catalog that refreshes without the network."""

    name: str
    models: int = 3
    calls: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return self.models

    async def refresh(self, *, force: bool = False) -> bool:
        return (await self.refresh_with_reason(force=force)).refreshed

    async def refresh_with_reason(self, *, force: bool = False) -> RefreshOutcome:
        self.calls.append(force)
        return RefreshOutcome(True)

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.models, "ready": True, "stale": False}


class FakeCatalogSet(list):
    """Iterable of catalogs with `status()`, like CatalogSet."""

    def status(self) -> dict[str, dict[str, Any]]:
        return {catalog.name: catalog.status() for catalog in self}


@dataclass
class Worker:
    """A bot worker stand-in: a bus subscribed on its own thread, answering commands."""

    context: WorkerContext
    bus: bus.Bus
    started_at: float = field(default_factory=time.time)

    def publish(self) -> None:
        """Publish this worker's live snapshot."""
        snapshot = build_worker_snapshot(
            context=self.context,
            started_at=self.started_at,
            bus_status=self.bus.snapshot(),
        )
        live.publish_snapshot(self.context.worker_id, snapshot)


@pytest.fixture
def bus_channel(redis_url: str) -> Iterator[str]:
    """Point this process's bus at a private channel on the test Redis."""
    channel = f"tomori:test-bus:{uuid.uuid4().hex}"
    # get_bus() first: configure() alone does not record the bus's pid (yet),
    # so the next get_bus() would replace the configured bus.
    bus.get_bus()
    bus.configure(redis_url=redis_url, channel=channel, worker_id="admin-web")
    yield channel
    bus.configure()  # back to the settings


@pytest.fixture
def worker(
    redis_url: str, bus_channel: str, test_cache: BoundedTTLCache[int, str]
) -> Iterator[Worker]:
    """Subscribe a worker holding `test_cache` to the bus (real Redis) with `execute_command`."""
    ensure_layers_loaded()  # like a real worker, it holds every layer
    catalogs = FakeCatalogSet([FakeCatalog("text"), FakeCatalog("embedding")])
    context = WorkerContext(worker_id="w1", shard_ids=[0, 1], catalogs=catalogs)
    worker_bus = bus.Bus(redis_url=redis_url, channel=bus_channel, worker_id="w1")
    stand_in = Worker(context=context, bus=worker_bus)
    worker_bus.set_command_handler(
        make_command_handler(context, after=stand_in.publish)
    )
    worker_bus.start_subscriber(flush=lambda: {})
    assert worker_bus.stats.wait_for(lambda s: s["flushes"] >= 1, timeout=5)
    stand_in.publish()
    yield stand_in
    worker_bus.close()
    live.withdraw_snapshot(context.worker_id)


def _user(username: str, *, staff: bool, manage: bool) -> User:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=staff)
    if manage:
        user.user_permissions.add(
            Permission.objects.get(
                codename="manage_caches", content_type__app_label="caches"
            )
        )
    return user


@pytest.fixture
def manager(db: None) -> User:
    """A staff user with caches.manage_caches."""
    return _user("operator", staff=True, manage=True)


@pytest.fixture
def manager_client(manager: User) -> Client:
    client = Client()
    client.force_login(manager)
    return client


@pytest.fixture
def staff_client(db: None) -> Client:
    """A staff user without the cache permission."""
    client = Client()
    client.force_login(_user("viewer", staff=True, manage=False))
    return client
