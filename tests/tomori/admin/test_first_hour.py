"""An operator's first hour in a real headless Chromium, as one script.

Log in; the dashboard fits a 1,400 px window, and a 1,024 px one with the
admin sidebar open (every column in view, no sideways scroll), and so does the
worker's own page; narrower, the worker's table scrolls with the cache names
and clear buttons kept in view; the charts have a line from the start-up
samples; each button answers; a rejected key followed by the auto-refresh is
no 405.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from caches.core import FakeClock
from caches.memory.readers import HostMemorySampler
from metrics.logger import CacheMetricsLogger
from metrics.models import MetricSample
from metrics.repository import MetricSampleRepository
from tests.tomori.admin.conftest import TEST_CACHE
from tests.tomori.admin.test_browser import SCREENSHOTS, log_in, operator_login, page
from tomori.admin.cache_dashboard import views
from tomori.domain.knobs import knobs

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["operator_login", "page"]  # fixtures, used by name below

DASHBOARD = "/admin/caches/cachecontrol/"
WORKER_PAGE = DASHBOARD + "worker/w1/"
CHARTS = "/admin/metrics/metricsample/charts/"
START_UP_TICKS = 3


@pytest.fixture
def start_up_samples(worker: Any, test_cache: Any) -> list[float]:
    """Run the real metrics logger through its first ticks on a fake clock."""
    clock, stop = FakeClock(), asyncio.Event()
    waits: list[float] = []

    async def wait(_stop: asyncio.Event, seconds: float) -> None:
        waits.append(seconds)
        if len(waits) >= START_UP_TICKS:
            stop.set()
            return
        clock.advance(seconds)

    logger = CacheMetricsLogger(
        interval_seconds=knobs().CACHE_METRICS_INTERVAL_MS / 1000,
        worker_id=worker.context.worker_id,
        repository=MetricSampleRepository(),
        host_sampler=HostMemorySampler(),
        clock=clock,
        wait=wait,
    )
    asyncio.run(logger.run(stop))
    assert logger.writer.flush(timeout=10)
    _spread_over_fake_time(waits)
    return waits


def _spread_over_fake_time(waits: list[float]) -> None:
    # The rows were stamped within milliseconds of real time; date each one
    # back to its tick on the fake clock, as if the seconds had passed.
    now = timezone.now()
    offsets = [sum(waits[:tick]) for tick in range(len(waits))]
    for name in ("cache_sizes", "host_memory"):
        rows = list(MetricSample.objects.filter(metric_name=name).order_by("id"))
        assert len(rows) == len(offsets), name
        for row, offset in zip(rows, offsets, strict=True):
            row.created_at = now - timedelta(seconds=offsets[-1] - offset)
        MetricSample.objects.bulk_update(rows, ["created_at"])


def _fits(tab: Any) -> dict[str, Any]:
    return tab.evaluate(
        """() => {
          const buttons = [...document.querySelectorAll("button.clear-cache")];
          const box = document.querySelector(".table-scroll");
          return {
            scroll: document.documentElement.scrollWidth,
            inner: window.innerWidth,
            table: box.scrollWidth,
            box: box.clientWidth,
            rightmost: Math.max(...buttons.map(b => b.getBoundingClientRect().right)),
            buttons: buttons.length,
          };
        }"""
    )


def _scrolled_right(tab: Any) -> dict[str, Any]:
    return tab.evaluate(
        """() => {
          const box = document.querySelector(".table-scroll");
          const row = document.querySelector("tr[data-cache]");
          row.scrollIntoView({block: "center"});  // elementFromPoint sees the window
          const sizeBefore = row.querySelector("td.size").getBoundingClientRect().left;
          box.scrollLeft = box.scrollWidth;
          const frame = box.getBoundingClientRect();
          const name = row.querySelector("td.name-col").getBoundingClientRect();
          const action = row.querySelector("td.action-col").getBoundingClientRect();
          const hit = document.elementFromPoint(name.left + 10, name.top + 8);
          return {
            scrolled: box.scrollLeft,
            sizeMoved: sizeBefore - row.querySelector("td.size").getBoundingClientRect().left,
            nameLeft: name.left - frame.left,
            nameShown: row.querySelector("td.name-col").contains(hit),
            actionInside: action.right <= frame.right + 1,
          };
        }"""
    )


def _columns_in_view_js() -> str:
    return """() => {
      const box = document.querySelector(".table-scroll").getBoundingClientRect();
      const row = document.querySelector("tr[data-cache]");
      const cells = {name: ".name-col", size: "td.size", cap: "td.cap",
                     hit: "td.hit-rate", clear: "td.action-col button.clear-cache"};
      const out = [];
      for (const [label, selector] of Object.entries(cells)) {
        const rows = [...document.querySelectorAll("tr[data-cache]")];
        const cell = rows.map(r => r.querySelector(selector)).find(c => c);
        const r = cell.getBoundingClientRect();
        if (r.left < box.left - 1 || r.right > box.right + 1 || r.right > window.innerWidth) {
          out.push(label);
        }
      }
      return out;
    }"""


def _columns_in_view(tab: Any) -> set[str]:
    """Return the key columns (name, size, cap, hit rate, clear) not fully in view."""
    return set(tab.evaluate(_columns_in_view_js()))


def _press(tab: Any, selector: str, result: str) -> None:
    tab.click(selector)
    tab.wait_for_selector(f"ul.messagelist >> text={result}")


def test_the_operators_first_hour(  # type: ignore[no-untyped-def]
    live_server, operator_login, worker, test_cache, start_up_samples, monkeypatch, page
) -> None:
    assert start_up_samples[:2] == [15.0, 15.0]  # start-up cadence, not 5 minutes
    statuses: list[int] = []  # of every page the browser loaded

    def note(response: Any) -> None:
        if response.request.resource_type == "document":
            statuses.append(response.status)

    page.on("response", note)

    page.set_viewport_size({"width": 1400, "height": 900})
    log_in(page, live_server.url, DASHBOARD)
    fits = _fits(page)
    assert fits["scroll"] <= fits["inner"], fits  # no horizontal scroll
    assert fits["table"] <= fits["box"], fits  # nor inside the table's box
    assert fits["buttons"] > 10 and fits["rightmost"] <= fits["inner"], fits
    page.screenshot(path=str(SCREENSHOTS / "first-hour-1400.png"), full_page=True)

    page.set_viewport_size({"width": 1024, "height": 800})
    page.reload()
    assert page.locator("#nav-sidebar").is_visible()  # the admin's sidebar, open
    narrow = _fits(page)
    page.screenshot(path=str(SCREENSHOTS / "first-hour-1024.png"), full_page=True)
    table_shot = SCREENSHOTS / "first-hour-1024-table.png"
    page.locator(".table-scroll").first.screenshot(path=str(table_shot))
    assert narrow["scroll"] <= narrow["inner"], narrow  # no horizontal scroll
    assert narrow["table"] <= narrow["box"], narrow  # nor inside the table's box
    assert narrow["rightmost"] <= narrow["inner"], narrow
    assert _columns_in_view(page) == set(), "columns out of view at 1,024 px"
    page.goto(f"{live_server.url}{WORKER_PAGE}")
    worker = _fits(page)
    page.screenshot(
        path=str(SCREENSHOTS / "first-hour-worker-1024.png"), full_page=True
    )
    assert worker["scroll"] <= worker["inner"], worker
    assert worker["table"] <= worker["box"], worker
    assert _columns_in_view(page) == set(), "worker columns out of view at 1,024 px"

    page.set_viewport_size({"width": 800, "height": 800})  # narrower: it scrolls
    page.reload()
    scrolled = _scrolled_right(page)
    assert scrolled["scrolled"] > 0 and scrolled["sizeMoved"] > 0, scrolled
    assert abs(scrolled["nameLeft"]) <= 1 and scrolled["nameShown"], scrolled
    assert scrolled["actionInside"], scrolled
    shot = SCREENSHOTS / "first-hour-800-scrolled.png"
    page.locator(".table-scroll").first.screenshot(path=str(shot))

    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{live_server.url}{CHARTS}")
    assert page.locator("#range-fitted").is_checked()
    for series in (TEST_CACHE, "RSS"):
        line = page.locator(f'polyline[data-series="{series}"]')
        assert int(line.get_attribute("data-points") or 0) >= 2, series
    page.screenshot(path=str(SCREENSHOTS / "first-hour-charts.png"), full_page=True)

    page.goto(f"{live_server.url}{DASHBOARD}")
    form = "#invalidate-key-form"
    page.select_option(f"{form} select[name=cache]", TEST_CACHE)
    page.fill(f"{form} input[name=key]", "3")
    _press(page, f"{form} button[type=submit]", "removed 1 entry")
    _press(page, f'button.clear-cache[data-cache="{TEST_CACHE}"]', "removed 4 entries")
    _press(page, "#clear-all", "clear every clearable cache: 1 worker answered")
    _press(page, "#reload-catalogs", "catalogs: text ok, embedding ok")
    page.click("#emergency-link")
    _press(page, "#confirm-emergency", "emergency clear: 1 worker answered")
    page.goto(f"{live_server.url}{WORKER_PAGE}")
    assert "operator commands 5" in page.locator(".panel.bus").inner_text()
    page.goto(f"{live_server.url}{DASHBOARD}")
    assert len(test_cache) == 0

    monkeypatch.setattr(views, "REFRESH_SECONDS", 1)  # the same timer, sooner
    page.select_option(f"{form} select[name=cache]", TEST_CACHE)
    page.fill(f"{form} input[name=key]", "forty-two")
    page.click(f"{form} button[type=submit]")
    assert "is not an integer id" in page.locator(".key-errors").inner_text()
    assert statuses[-1] == 400 and page.locator("#refresh-paused").is_visible()
    page.check("#auto-refresh")  # the operator has read the error
    with page.expect_navigation(url=f"**{DASHBOARD}"):
        pass
    assert statuses[-1] == 200 and 405 not in statuses
    assert "HTTP ERROR" not in page.content()
    page.screenshot(path=str(SCREENSHOTS / "first-hour-after-error.png"))
