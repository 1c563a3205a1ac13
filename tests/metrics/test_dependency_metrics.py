"""What a scrape shows of the database breakers, the catalogs and metric_samples writes."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from caches.catalogs.catalog_set import CatalogSet
from caches.catalogs.samples import sample_catalogs
from caches.core import FakeClock
from caches.core.breaker import CircuitBreaker
from metrics.prometheus import dependency_families, memory_families
from metrics.prometheus.worker import WorkerObservability
from metrics.repository import default_repository
from tests.metrics.alert_rules import binary
from tests.metrics.scraping import Samples, get, parse, scrape, value
from tomori.domain.knobs import knobs


def _render(*metrics: Any) -> Samples:
    class Fixed(Collector):
        def collect(self) -> Iterator[Any]:
            yield from metrics

    registry = CollectorRegistry()
    registry.register(Fixed())
    return parse(generate_latest(registry).decode())


@pytest.fixture
def serve() -> Iterator[Any]:
    """Serve a worker endpoint on a free port for a stand-in worker."""
    started: list[WorkerObservability] = []

    def start(**parts: Any) -> str:
        worker = SimpleNamespace(
            worker_id="dep-test:1:shard0",
            started_at=1_700_000_000.0,
            stop_event=asyncio.Event(),
            client=None,
            pipeline=None,
            guard=None,
            options=SimpleNamespace(shard_ids=[0], shard_count=1),
            cache_bytes=None,
            **parts,
        )
        observability = WorkerObservability(
            worker,
            address="127.0.0.1",
            port=0,
            refresh_seconds=60,
            size_sample=0,
            memory_limit_bytes=2**30,
        )
        observability.start()
        started.append(observability)
        return observability.endpoint.url

    yield start
    for observability in started:
        observability.stop()


def test_a_tripped_breaker_shows_open_then_closed_after_a_good_probe() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(open_seconds=5, clock=clock)
    breaker.failed()
    breaker.allow()  # refused: still open
    samples = _render(
        *dependency_families.breaker_families({"reads": breaker}, timeouts=3)
    )
    assert (
        value(samples, "tomori_database_breaker_state", lane="reads", state="open") == 1
    )
    assert (
        value(samples, "tomori_database_breaker_state", lane="reads", state="closed")
        == 0
    )
    assert value(samples, "tomori_database_breaker_trips_total", lane="reads") == 1
    assert value(samples, "tomori_database_breaker_refused_total", lane="reads") == 1
    assert value(samples, "tomori_database_call_timeouts_total") == 3
    clock.advance(5)
    assert breaker.allow()  # the probe
    breaker.succeeded()
    samples = _render(
        *dependency_families.breaker_families({"reads": breaker}, timeouts=3)
    )
    assert (
        value(samples, "tomori_database_breaker_state", lane="reads", state="closed")
        == 1
    )
    assert (
        value(samples, "tomori_database_breaker_state", lane="reads", state="open") == 0
    )


async def test_catalogs_export_their_snapshot_time_and_ttl() -> None:
    async with CatalogSet(ttl=600, wall_clock=lambda: 1_700_000_100.0) as catalogs:
        assert catalogs.text.load_snapshot(sample_catalogs()["text"], 1_700_000_000.0)
        samples = _render(*dependency_families.catalog_families(catalogs))
    assert value(samples, "tomori_catalog_ready", catalog="text") == 1
    assert value(samples, "tomori_catalog_ready", catalog="video") == 0
    assert value(samples, "tomori_catalog_ttl_seconds", catalog="video") == 600
    stamp = "tomori_catalog_snapshot_timestamp_seconds"
    assert value(samples, stamp, catalog="text") == 1_700_000_000.0
    assert (stamp, (("catalog", "video"),)) not in samples  # never fetched: absent


@pytest.mark.django_db(transaction=True)
def test_a_worker_scrape_shows_breakers_catalogs_samples_and_the_bound(serve) -> None:  # type: ignore[no-untyped-def]
    catalogs = CatalogSet(ttl=600)
    assert catalogs.image.load_snapshot(sample_catalogs()["image"], 1_700_000_000.0)
    url = serve(catalogs=catalogs)
    before = scrape(url)
    assert default_repository.record_sample("dep_test", {"n": 1})
    assert not default_repository.record_sample("dep_test", {"n": object()})
    after = scrape(url)
    for name in ("inserted", "failures"):
        key = f"tomori_metric_samples_{name}_total"
        assert value(after, key) == value(before, key) + 1, key
    assert "tomori_metric_samples_dropped_total" in {n for n, _ in after}
    for lane in ("reads", "writes"):
        assert (
            value(after, "tomori_database_breaker_state", lane=lane, state="closed")
            == 1
        )
    assert value(after, "tomori_catalog_ready", catalog="image") == 1
    assert value(after, "tomori_catalog_ttl_seconds", catalog="image") == 600
    bound = value(after, "tomori_invalidation_staleness_bound_seconds")
    assert bound == knobs().INVALIDATION_STALENESS_BOUND_SECONDS > 0


def test_a_worker_without_catalogs_exports_no_catalog_series(serve) -> None:  # type: ignore[no-untyped-def]
    samples = scrape(serve(catalogs=None))
    assert not [name for name, _ in samples if name.startswith("tomori_catalog_")]
    assert (
        value(samples, "tomori_database_breaker_state", lane="reads", state="closed")
        == 1
    )


def test_emergency_sources_are_exported_at_zero_before_their_first_clear() -> None:
    samples = _render(*memory_families.emergency_families({"operator": 2}, 0, {}))
    assert value(samples, "tomori_emergency_clears_total", source="operator") == 2
    key = ("tomori_emergency_clears_total", (("source", "memory_guard"),))
    assert samples[key] == 0  # present: increase() sees its first clear


def test_promtool_finds_nothing_to_complain_about_in_a_scrape(serve) -> None:  # type: ignore[no-untyped-def]
    catalogs = CatalogSet(ttl=600)
    assert catalogs.text.load_snapshot(sample_catalogs()["text"], 1_700_000_000.0)
    status, body = get(serve(catalogs=catalogs) + "/metrics")
    assert status == 200 and "tomori_catalog_ttl_seconds" in body
    result = subprocess.run(
        [binary("promtool"), "check", "metrics"],
        input=body,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    complaints = (result.stdout + result.stderr).strip()
    assert result.returncode == 0 and not complaints, complaints
