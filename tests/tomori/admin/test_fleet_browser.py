"""Sixteen shards on one screen pair: the dashboard in Chromium with the workers' own snapshots.

Each worker's snapshot is built and published by the bot worker's own code
(`BotWorker`'s live-snapshot job: caches, memory, bus, traffic over the last
minute, readiness), once per worker, under a Kubernetes-like pod name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from caches import bus
from caches.core import FakeClock
from caches.memory.guard import MemoryGuard
from caches.operations import WorkerContext, ensure_layers_loaded
from metrics.prometheus.buckets import TURN_BUCKETS, TurnTimings
from metrics.traffic import TrafficWindow
from tests.tomori.admin.test_browser import SCREENSHOTS, log_in, operator_login, page
from tomori.bot.pipeline import MessagePipeline
from tomori.bot.worker import BotWorker, WorkerOptions

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["operator_login", "page"]  # fixtures, used by name below

DASHBOARD = "/admin/caches/cachecontrol/"
SCREEN = {"width": 1280, "height": 1000}
#: Workers whose readiness probe fails (the rest are healthy).
NOT_READY = 2


def _pod_worker_id(shard: int) -> str:
    return f"tomori-bot-7c9f8d6b5-{0x9A3F1 + 7 * shard:05x}:1:shard{shard}"


def _bot_worker(shard: int, count: int) -> BotWorker:
    """A bot worker as runbot builds it, with a minute of traffic behind it."""
    options = WorkerOptions(
        worker_id=_pod_worker_id(shard), shard_ids=[shard], shard_count=count
    )
    worker = BotWorker(options)
    worker.context = WorkerContext(worker_id=worker.worker_id, shard_ids=[shard])
    worker.pipeline = MessagePipeline()
    worker.guard = MemoryGuard(  # as a container's 512 MB limit sets it up
        limit_bytes=512 * 2**20,
        warning_threshold=0.8,
        critical_threshold=0.9,
        cooldown_seconds=30,
    )
    timings = TurnTimings()
    worker.client = SimpleNamespace(turn_timings=timings)
    clock = FakeClock()
    worker.traffic = TrafficWindow(TURN_BUCKETS, clock=clock)
    worker._take_snapshot()  # the minute's first sample
    clock.advance(60)
    worker.pipeline.counters.received += 120 * (shard + 1)
    for n in range(100):
        timings.observe("ok", 0.0002 if n < 98 else 0.02)
    if shard >= count - NOT_READY:
        failing = {"failing": ["gateway_connected"]}
        health = SimpleNamespace(readiness=lambda: (False, failing))
        worker.observability = SimpleNamespace(health=health)  # type: ignore[assignment]
    return worker


@pytest.fixture
def publish_fleet(
    bus_channel: str, settings: Any
) -> Iterator[Callable[[int], list[str]]]:
    """Publish `count` workers' live snapshots with the worker's own publisher."""
    # Published once: a browser slow to start must not find them stale (the
    # dashboard calls a snapshot stale past two intervals).
    settings.WORKER_SNAPSHOT_INTERVAL_SECONDS = 60.0
    ensure_layers_loaded()
    here = bus.get_bus()
    here.start_subscriber(flush=lambda: {})  # the workers' bus figures: connected
    assert here.stats.wait_for(lambda s: s["connected"], timeout=5)

    def publish(count: int) -> list[str]:
        workers = [_bot_worker(shard, count) for shard in range(count)]
        for worker in workers:
            asyncio.run(worker._publish_async())
        return [worker.worker_id for worker in workers]

    yield publish
    here.stop()


# Playwright's sync API runs an event loop in the test's thread: the workers
# publish (on loops of their own) in fixtures that come before `page`.
@pytest.fixture
def sixteen_workers(publish_fleet: Callable[[int], list[str]]) -> list[str]:
    return publish_fleet(16)


@pytest.fixture
def three_workers(publish_fleet: Callable[[int], list[str]]) -> list[str]:
    return publish_fleet(3)


def _measure(tab: Any) -> dict[str, Any]:
    return tab.evaluate(
        """() => {
          const rows = [...document.querySelectorAll("#fleet-workers tr[data-worker]")];
          return {
            height: document.documentElement.scrollHeight,
            overflow: document.documentElement.scrollWidth - window.innerWidth,
            ids: rows.map(r => r.dataset.worker),
            levels: rows.map(r => r.className),
            idBottoms: rows.map(r => r.querySelector(".worker-id a")
                                     .getBoundingClientRect().bottom + window.scrollY),
            cacheRows: [...document.querySelectorAll("#fleet-caches tbody tr")]
                         .map(r => Math.round(r.getBoundingClientRect().height)),
          };
        }"""
    )


def _open(tab: Any, url: str) -> int:
    response = tab.goto(url)
    return len(response.body())


def test_sixteen_workers_fit_two_screens_in_chromium(  # type: ignore[no-untyped-def]
    live_server, operator_login, sixteen_workers, page
) -> None:
    ids = sixteen_workers
    page.set_viewport_size(SCREEN)
    log_in(page, live_server.url, DASHBOARD)
    size = _open(page, live_server.url + DASHBOARD)
    wide = _measure(page)
    shot = SCREENSHOTS / "fleet-16-workers-1280.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"16 workers at 1,280 x 1,000: {wide['height']} px, {size:,} bytes of HTML")
    assert sorted(wide["ids"]) == sorted(ids)
    # The two that are not ready come first, marked.
    assert set(wide["ids"][:NOT_READY]) == set(ids[-NOT_READY:])
    assert all("level-danger" in level for level in wide["levels"][:NOT_READY])
    assert wide["height"] <= 2 * SCREEN["height"], wide["height"]
    assert wide["overflow"] <= 0, wide["overflow"]  # no sideways scroll either
    assert size <= 120_000, size
    # A cache is one line: the tallest row is no taller than the shortest by much.
    assert max(wide["cacheRows"]) <= 1.3 * min(wide["cacheRows"]), wide["cacheRows"]
    page.set_viewport_size({"width": 1024, "height": 1000})
    page.reload()
    assert page.locator("#nav-sidebar").is_visible()  # the admin's sidebar, open
    narrow = _measure(page)
    page.screenshot(path=str(SCREENSHOTS / "fleet-16-workers-1024.png"), full_page=True)
    print(f"16 workers at 1,024: {narrow['height']} px, {narrow['overflow']} px wider")
    assert narrow["overflow"] <= 0, narrow["overflow"]


def test_with_three_workers_every_worker_is_on_the_first_screen(  # type: ignore[no-untyped-def]
    live_server, operator_login, three_workers, page
) -> None:
    ids = three_workers
    page.set_viewport_size(SCREEN)
    log_in(page, live_server.url, DASHBOARD)
    found = _measure(page)
    page.screenshot(path=str(SCREENSHOTS / "fleet-3-workers-1280.png"), full_page=True)
    print(
        f"3 workers at 1,280 x 1,000: {found['height']} px; ids end at {found['idBottoms']}"
    )
    assert sorted(found["ids"]) == sorted(ids)
    assert max(found["idBottoms"]) <= SCREEN["height"], found["idBottoms"]
    # Each row opens the worker's own page: its caches and turns.
    page.click(f'tr[data-worker="{ids[0]}"] .worker-id a')
    page.wait_for_selector(f'section.worker[data-worker="{ids[0]}"] table.layers')
    assert page.title().startswith(f"Worker {ids[0]}")
