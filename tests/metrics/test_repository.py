"""record_sample never raises, warns once per outage, and prunes on the write path."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from caches.core import FakeClock
from metrics.models import MetricSample
from metrics.repository import MetricSampleRepository


def _old_rows(count: int, days: int = 40) -> None:
    created = timezone.now() - timedelta(days=days)
    MetricSample.objects.bulk_create(
        [
            MetricSample(metric_name="cache_sizes", fields={}, created_at=created)
            for _ in range(count)
        ]
    )


def _kill_django_connection() -> None:
    """Terminate the server side of Django's connection, as a crashed database would."""
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    params = connection.get_connection_params()
    dsn = {k: v for k, v in params.items() if k in {"host", "port", "user", "dbname"}}
    with psycopg.connect(**dsn, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.mark.django_db
def test_record_sample_stores_the_fields(fake_clock: FakeClock) -> None:
    repo = MetricSampleRepository(clock=fake_clock)
    assert repo.record_sample("cache_sizes", {"user": 3}) is True
    row = MetricSample.objects.get()
    assert row.metric_name == "cache_sizes" and row.fields == {"user": 3}


@pytest.mark.django_db
@override_settings(
    METRIC_SAMPLE_PRUNE_INTERVAL_MS=60_000, METRIC_SAMPLE_RETENTION_DAYS=30
)
def test_pruning_rides_the_write_path_at_most_once_per_interval(
    fake_clock: FakeClock,
) -> None:
    repo = MetricSampleRepository(clock=fake_clock)
    _old_rows(3)
    _old_rows(2, days=10)  # inside retention: kept
    repo.record_sample("cache_sizes", {})
    assert MetricSample.objects.count() == 3
    _old_rows(4)
    fake_clock.advance(59)
    repo.record_sample("cache_sizes", {})
    assert MetricSample.objects.count() == 3 + 4 + 1
    fake_clock.advance(2)
    repo.record_sample("cache_sizes", {})
    assert MetricSample.objects.count() == 2 + 3
    assert repo.pruned == 7


@pytest.mark.django_db(transaction=True)
def test_dead_database_connection_never_raises_and_warns_once(
    postgres: None, caplog: pytest.LogCaptureFixture, fake_clock: FakeClock
) -> None:
    repo = MetricSampleRepository(clock=fake_clock)
    caplog.set_level(logging.INFO)
    for _ in range(3):
        _kill_django_connection()
        assert repo.record_sample("cache_sizes", {"n": 1}) is False
    failures = [
        json.loads(r.getMessage())
        for r in caplog.records
        if r.name == "tomori.metrics" and "metric_sink_failure" in r.getMessage()
    ]
    assert len(failures) == 1
    assert failures[0]["sink"] == "metric_samples"
    assert repo.failing and repo.failures == 3


@pytest.mark.django_db(transaction=True)
@override_settings(METRIC_SAMPLE_PRUNE_INTERVAL_MS=60_000)
def test_next_success_after_an_outage_stores_and_prunes(
    postgres: None, fake_clock: FakeClock
) -> None:
    repo = MetricSampleRepository(clock=fake_clock)
    _old_rows(5)
    _kill_django_connection()
    assert repo.record_sample("host_memory", {}) is False
    assert repo.record_sample("host_memory", {"ok": True}) is True
    assert not repo.failing
    assert list(MetricSample.objects.values_list("fields", flat=True)) == [{"ok": True}]


@pytest.fixture
def stopped_database(postgres: None) -> Iterator[Callable[[], None]]:
    """Point Django's connection at a closed port, as if PostgreSQL were stopped.

    Yields `restart()`, which points it back at the real server; the settings
    are restored after the test in any case.
    """
    saved = {key: connection.settings_dict[key] for key in ("HOST", "PORT")}

    def restart() -> None:
        connection.close()
        connection.settings_dict.update(saved)

    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=1)  # nothing listens on 1
    yield restart
    restart()


@pytest.mark.django_db(transaction=True)
@override_settings(METRIC_SAMPLE_PRUNE_INTERVAL_MS=60_000)
def test_stopped_database_returns_false_warns_once_then_recovers(
    stopped_database: Callable[[], None],
    caplog: pytest.LogCaptureFixture,
    fake_clock: FakeClock,
) -> None:
    repo = MetricSampleRepository(clock=fake_clock)
    caplog.set_level(logging.INFO)
    assert repo.record_sample("host_memory", {"n": 1}) is False
    assert repo.record_sample("host_memory", {"n": 2}) is False
    warnings = [
        r
        for r in caplog.records
        if r.name == "metrics.repository" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1 and "not retried" in warnings[0].getMessage()
    assert repo.failing and repo.failures == 2

    stopped_database()  # PostgreSQL is back
    _old_rows(4)
    assert repo.record_sample("host_memory", {"n": 3}) is True
    assert not repo.failing
    assert list(MetricSample.objects.values_list("fields", flat=True)) == [{"n": 3}]
    assert repo.pruned == 4
