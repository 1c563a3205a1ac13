"""The operator's tools degrade instead of breaking: Redis or the database down, keys missing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from caches import bus, live
from caches.bus import BusUnavailable
from caches.core import BoundedTTLCache
from caches.messages import ClearAll
from caches.operations import WorkerContext, make_command_handler
from metrics.models import MetricSample
from tests.support.faults import free_port
from tests.tomori.admin.conftest import TEST_CACHE, Worker
from tomori.domain.repositories.webhooks import save_managed_webhook

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = "admin:caches_cachecontrol_changelist"
EMERGENCY = "admin:caches_emergency_clear"
CHARTS = "admin:metrics_metricsample_charts"
SAMPLES = "admin:metrics_metricsample_changelist"
POSTS = {
    "admin:caches_clear_cache": {"cache": TEST_CACHE},
    "admin:caches_invalidate_key": {"cache": TEST_CACHE, "key": "3"},
    "admin:caches_clear_all": {},
    "admin:caches_refresh_catalogs": {},
    "admin:caches_emergency_clear": {},
}


@pytest.fixture
def own_worker(
    own_redis, settings, test_cache: BoundedTTLCache[int, str]
) -> Iterator[Worker]:  # type: ignore[no-untyped-def]
    """A worker and this process's bus on the test's own redis-server, which it may kill."""
    settings.REDIS_URL = own_redis.url
    live.reset_for_tests()
    channel = f"tomori:test-bus:{uuid.uuid4().hex}"
    bus.get_bus()
    bus.configure(redis_url=own_redis.url, channel=channel, worker_id="admin-web")
    context = WorkerContext(worker_id="w1", shard_ids=[0])
    worker_bus = bus.Bus(redis_url=own_redis.url, channel=channel, worker_id="w1")
    stand_in = Worker(context=context, bus=worker_bus)
    worker_bus.set_command_handler(make_command_handler(context))
    worker_bus.start_subscriber(flush=lambda: {})
    assert worker_bus.stats.wait_for(lambda s: s["flushes"] >= 1, timeout=5)
    stand_in.publish()
    yield stand_in
    worker_bus.close(drain_timeout=0.1)
    bus.configure()
    live.reset_for_tests()


def _sample(minutes_ago: int) -> None:
    MetricSample.objects.create(
        metric_name="cache_sizes",
        fields={"worker_id": "w1", TEST_CACHE: 5},
        created_at=timezone.now() - timedelta(minutes=minutes_ago),
    )


def _messages(response) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(message) for message in response.context["messages"]]


# ----------------------------------------------------------------- Redis down


@pytest.mark.django_db
def test_dashboard_names_the_fault_and_the_last_sample_age_when_redis_dies(
    own_worker: Worker, own_redis, manager_client: Client
) -> None:  # type: ignore[no-untyped-def]
    assert 'data-worker="w1"' in manager_client.get(reverse(DASHBOARD)).content.decode()
    _sample(minutes_ago=7)
    own_redis.kill()
    response = manager_client.get(reverse(DASHBOARD))
    assert response.status_code == 200
    [banner] = response.context["faults"]
    assert banner.startswith("Live worker data unavailable: Redis unreachable at")
    assert f"redis://127.0.0.1:{own_redis.port}/0" in banner
    assert "the last cache_sizes sample is 7 min old" in banner
    html = response.content.decode()
    assert 'id="fault-banner"' in html and "Live worker data unavailable" in html
    assert 'data-worker="w1"' not in html and "No bot worker is live" not in html


@pytest.mark.django_db
def test_emergency_confirmation_page_renders_from_the_registry_when_redis_dies(
    own_worker: Worker, own_redis, manager_client: Client
) -> None:  # type: ignore[no-untyped-def]
    own_redis.kill()
    response = manager_client.get(reverse(EMERGENCY))
    assert response.status_code == 200
    [banner] = response.context["faults"]
    assert "Redis unreachable at" in banner and "registry" in banner
    assert TEST_CACHE in response.context["plan"].cleared


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(POSTS))
def test_operator_posts_report_bus_unreachable_as_a_form_error(
    name: str,
    own_worker: Worker,
    own_redis,
    manager_client: Client,
    test_cache: BoundedTTLCache[int, str],
) -> None:  # type: ignore[no-untyped-def]
    own_redis.kill()
    data = {**POSTS[name], **({"confirm": "on"} if name == EMERGENCY else {})}
    response = manager_client.post(reverse(name), data)
    assert response.status_code == 503
    [error] = [m for m in _messages(response) if m.startswith("Nothing was sent")]
    assert "bus unreachable: Redis at" in error and "does not answer" in error
    assert 'id="fault-banner"' in response.content.decode()
    assert len(test_cache) == 5  # nothing reached the worker
    assert not LogEntry.objects.exists()  # nothing was sent, so nothing is logged


@pytest.mark.django_db
def test_a_worker_pages_button_reports_bus_unreachable_too(
    own_worker: Worker,
    own_redis,
    manager_client: Client,
    test_cache: BoundedTTLCache[int, str],
) -> None:  # type: ignore[no-untyped-def]
    own_redis.kill()
    page = manager_client.get(reverse("admin:caches_worker", args=["w1"]))
    assert page.status_code == 503  # whether w1 is live cannot be known
    assert "Live worker data unavailable" in page.content.decode()
    response = manager_client.post(
        reverse("admin:caches_clear_cache"), {"cache": TEST_CACHE, "worker": "w1"}
    )
    assert response.status_code == 503
    [error] = [m for m in _messages(response) if m.startswith("Nothing was sent")]
    assert "bus unreachable" in error
    assert len(test_cache) == 5 and not LogEntry.objects.exists()


@pytest.mark.django_db
def test_invalidate_key_error_sits_on_the_key_form(
    own_worker: Worker, own_redis, manager_client: Client
) -> None:  # type: ignore[no-untyped-def]
    own_redis.kill()
    response = manager_client.post(
        reverse("admin:caches_invalidate_key"), {"cache": TEST_CACHE, "key": "3"}
    )
    [error] = response.context["key_form"].non_field_errors()
    assert error.startswith("bus unreachable")


def test_send_command_raises_bus_unavailable_and_queues_nothing(own_redis) -> None:  # type: ignore[no-untyped-def]
    sender = bus.Bus(redis_url=own_redis.url, channel=f"tomori:test:{uuid.uuid4().hex}")
    try:
        assert sender.send_command(ClearAll.issue(issued_by="test"), timeout=1.0) == []
        own_redis.kill()
        with pytest.raises(BusUnavailable, match="bus unreachable: Redis at"):
            sender.send_command(ClearAll.issue(issued_by="test"), timeout=1.0)
        assert sender.snapshot()["backlog"] == 0  # it cannot run later, unannounced
    finally:
        sender.close(drain_timeout=0.1)


def test_a_paused_redis_is_reported_within_seconds(own_redis) -> None:  # type: ignore[no-untyped-def]
    sender = bus.Bus(redis_url=own_redis.url, channel=f"tomori:test:{uuid.uuid4().hex}")
    own_redis.pause()
    started = time.monotonic()
    try:
        with pytest.raises(BusUnavailable, match="does not answer"):
            sender.send_command(ClearAll.issue(issued_by="test"), timeout=30.0)
        assert time.monotonic() - started < 10
    finally:
        own_redis.resume()
        sender.close(drain_timeout=0.1)


def test_module_send_command_raises_bus_unavailable_on_a_closed_port() -> None:
    bus.get_bus()
    bus.configure(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    try:
        with pytest.raises(BusUnavailable, match="Connection refused"):
            bus.send_command(ClearAll.issue(issued_by="test"), timeout=1.0)
    finally:
        bus.configure()


# ----------------------------------------------------------- management commands


def _database_url(port: int | None = None) -> str:
    params = connection.settings_dict
    host = params["HOST"] or "127.0.0.1"
    return (
        f"postgres://{params['USER'] or 'postgres'}@{host}:"
        f"{port or params['PORT'] or 5432}/{params['NAME']}"
    )


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tomori.settings_test", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["cache_stats"], "Redis unreachable at redis://127.0.0.1:"),
        (["emergency_clear", "--yes", "--timeout", "1"], "bus unreachable: Redis at"),
        (["invalidate_cache", "user", "--timeout", "1"], "bus unreachable: Redis at"),
        (["refresh_catalogs", "--timeout", "1"], "bus unreachable: Redis at"),
    ],
)
def test_commands_exit_non_zero_with_one_line_when_redis_is_down(
    args: list[str], fragment: str, postgres: None
) -> None:
    result = _manage(
        *args,
        REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
        DATABASE_URL=_database_url(),
    )
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("CommandError: ") and fragment in line
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.django_db
def test_cache_stats_names_the_database_when_it_is_down(
    postgres: None, redis_url: str
) -> None:
    result = _manage(
        "cache_stats",
        REDIS_URL=redis_url,
        TOMORI_BUS_CHANNEL=f"tomori:test-bus:{uuid.uuid4().hex}",
        DATABASE_URL=_database_url(port=free_port()),
    )
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("CommandError: database unreachable: ")


# ------------------------------------------------------------------- database down


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", [DASHBOARD, CHARTS, SAMPLES, EMERGENCY])
def test_admin_pages_answer_503_with_a_clear_message_when_the_database_is_down(
    name: str, admin_client: Client, proxied_database
) -> None:  # type: ignore[no-untyped-def]
    assert admin_client.get(reverse(name)).status_code == 200  # through the proxy
    proxied_database.refuse()
    response = admin_client.get(reverse(name))
    assert response.status_code == 503
    html = response.content.decode()
    assert "Database unreachable" in html and "database unreachable:" in html
    assert response["Retry-After"] == "30"


# --------------------------------------------------------- stored data, kept


@pytest.mark.django_db
def test_dashboard_reports_webhook_rows_under_missing_key_versions(
    manager_client: Client, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.CRYPTO_SECRETS = {1: "only-the-first"}
    for channel, version in [(1, 1), (2, 3), (3, 3)]:
        save_managed_webhook(
            channel_disc_id=channel,
            webhook_disc_id=50 + channel,
            token_ciphertext="opaque",
            key_version=version,
        )
    response = manager_client.get(reverse(DASHBOARD))
    [note] = response.context["notes"]
    assert note.startswith("2 stored webhook tokens under key versions")
    assert "(v3: 2)" in note and "CRYPTO_SECRET_V3" in note
    assert 'id="stored-notes"' in response.content.decode()


@pytest.mark.django_db
def test_pages_that_need_no_redis_still_answer_when_it_dies(
    own_worker: Worker, own_redis, admin_client: Client
) -> None:  # type: ignore[no-untyped-def]
    own_redis.kill()
    for url in ["/admin/", reverse(CHARTS), reverse(SAMPLES), reverse(DASHBOARD)]:
        assert admin_client.get(url).status_code == 200, url
