"""The operator's admin in a real headless Chromium: clear a cache, read the charts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from conftest import require_service
from metrics.models import MetricSample
from tests.tomori.admin.conftest import PASSWORD, TEST_CACHE

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"


@pytest.fixture
def page() -> Iterator[object]:
    """Yield a Playwright page of the system's Chromium (never a downloaded browser)."""
    if not Path(CHROMIUM).exists():
        require_service("Chromium", f"{CHROMIUM} is not installed")
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS
        )
        context = browser.new_context(viewport={"width": 1500, "height": 1000})
        tab = context.new_page()
        tab.set_default_timeout(15_000)
        tab.on("dialog", lambda dialog: dialog.accept())  # the confirm() before a clear
        yield tab
        context.close()
        browser.close()


@pytest.fixture
def operator_login() -> User:
    """A staff user who may manage caches and view metric samples."""
    user = User.objects.create_user(
        "browser-operator", password=PASSWORD, is_staff=True
    )
    user.user_permissions.add(
        Permission.objects.get(codename="manage_caches"),
        Permission.objects.get(codename="view_metricsample"),
    )
    return user


def log_in(page, base_url: str, next_path: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{base_url}/admin/login/?next={next_path}")
    page.fill("#id_username", "browser-operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{next_path}")


def test_clearing_a_cache_from_the_dashboard_empties_it(  # type: ignore[no-untyped-def]
    live_server, operator_login, worker, test_cache, page
) -> None:
    log_in(page, live_server.url, "/admin/caches/cachecontrol/")
    size = page.locator(f'tr[data-cache="{TEST_CACHE}"] td.size')
    assert size.inner_text() == "5"
    assert (
        page.locator(f'tr[data-cache="{TEST_CACHE}"] td.fill')
        .inner_text()
        .endswith("50.0 %")
    )
    page.screenshot(path=str(SCREENSHOTS / "cache-dashboard.png"), full_page=True)

    page.click(f'tr[data-cache="{TEST_CACHE}"] button.clear-cache')
    page.wait_for_selector("text=worker w1 (shards 0, 1): removed 5 entries")
    assert size.inner_text() == "0"
    assert len(test_cache) == 0
    page.screenshot(
        path=str(SCREENSHOTS / "cache-dashboard-after-clear.png"), full_page=True
    )


def test_a_bad_key_shows_a_form_error_in_the_browser(  # type: ignore[no-untyped-def]
    live_server, operator_login, worker, test_cache, page
) -> None:
    log_in(page, live_server.url, "/admin/caches/cachecontrol/")
    page.select_option("#invalidate-key-form select[name=cache]", TEST_CACHE)
    page.fill("#invalidate-key-form input[name=key]", "forty-two")
    page.click("#invalidate-key-form button[type=submit]")
    error = page.locator(".key-errors")
    assert "is not an integer id" in error.inner_text()
    assert len(test_cache) == 5


@pytest.fixture
def seeded_samples() -> None:
    """Ten hours of cache_sizes samples every five minutes, and one emergency."""
    now = timezone.now()
    MetricSample.objects.bulk_create(
        MetricSample(
            metric_name="cache_sizes",
            fields={
                "worker_id": "w1",
                TEST_CACHE: minute % 40,
                "rss_mb": 150 + minute % 9,
                "memory_limit_mb": 512,
                "python_allocated_blocks": 90_000,
            },
            created_at=now - timedelta(minutes=minute),
        )
        for minute in range(0, 600, 5)
    )
    MetricSample.objects.create(
        metric_name="emergency_cache_clear",
        fields={},
        created_at=now - timedelta(hours=3),
    )


# Playwright's sync API runs an event loop in this thread, where Django refuses
# database calls: every fixture touching the database comes before `page`.
def test_the_charts_page_draws_the_seeded_samples(  # type: ignore[no-untyped-def]
    live_server, operator_login, seeded_samples, page
) -> None:
    log_in(page, live_server.url, "/admin/metrics/metricsample/charts/")
    sizes = page.locator(f'polyline[data-series="{TEST_CACHE}"]')
    assert int(sizes.get_attribute("data-points") or 0) == 120
    assert len((sizes.get_attribute("points") or "").split()) == 120
    assert page.locator("line.emergency-mark").count() == 5
    page.check("input[value=hour]")
    page.click("input[type=submit]")
    page.wait_for_url("**range=hour**")
    assert int(sizes.get_attribute("data-points") or 0) == 12
    page.screenshot(path=str(SCREENSHOTS / "metric-charts.png"), full_page=True)
