"""metric_samples list and charts: read-only, few queries, index-backed with 100,000 rows."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from metrics.charts import MAX_POINTS, build_charts_page, chart_window, load_series
from metrics.models import MetricSample

pytestmark = pytest.mark.django_db

INDEX = "metric_name_created_idx"
CHARTS = "admin:metrics_metricsample_charts"
CHANGELIST = "admin:metrics_metricsample_changelist"
ROWS = 100_000
SPACING_SECONDS = 52  # 100,000 rows span two months


@pytest.fixture
def samples(postgres: None) -> None:
    """Insert 100,000 samples (half cache_sizes, 40% host_memory) and ANALYZE."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO metric_samples (metric_name, fields, created_at)
            SELECT CASE WHEN i %% 10 < 5 THEN 'cache_sizes'
                        WHEN i %% 10 < 9 THEN 'host_memory' ELSE 'loop_lag' END,
                   CASE WHEN i %% 10 < 5 THEN jsonb_build_object(
                       'worker_id', 'w1', 'user', i %% 500, 'tomori_state', i %% 50,
                       'discord_members', 3000 + i %% 7, 'rss_mb', 100 + i %% 30,
                       'memory_limit_mb', 512, 'python_allocated_blocks', 100000 + i %% 99,
                       'memory_state', 'safe', 'cache_entries_total', 1)
                   ELSE jsonb_build_object(
                       'worker_id', 'w1', 'mem_available_mb', 2000 - i %% 100,
                       'mem_total_mb', 4096, 'psi_memory_some_avg10', (i %% 7)::float / 2)
                   END,
                   now() - i * %s * interval '1 second'
            FROM generate_series(1, %s) AS i
            """,
            [SPACING_SECONDS, ROWS],
        )
        cursor.execute("ANALYZE metric_samples")
    now = timezone.now()
    for hours in (2, 5):
        MetricSample.objects.create(
            metric_name="emergency_cache_clear",
            fields={"total_cleared": 10},
            created_at=now - timedelta(hours=hours),
        )


def _plan(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


def _sample_queries(captured: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "metric_samples" in q["sql"]]


def test_a_series_is_one_index_backed_query_of_at_most_max_points(samples) -> None:  # type: ignore[no-untyped-def]
    window = chart_window("week")
    with CaptureQueriesContext(connection) as captured:
        series = load_series("cache_sizes", ["user", "rss_mb"], window=window)
    assert len(captured.captured_queries) == 1
    user, rss = series
    assert 100 < len(user.points) <= MAX_POINTS
    assert all(window.since <= at < window.until for at, _ in user.points)
    # i % 10 < 5 for cache_sizes rows, so the largest "user" value is 494.
    assert max(value for _, value in user.points) == 494  # buckets keep their peak
    assert all(100 <= value <= 129 for _, value in rss.points)
    assert INDEX in _plan(captured.captured_queries[0]["sql"])


def test_the_charts_page_needs_four_index_backed_queries(samples) -> None:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    with CaptureQueriesContext(connection) as captured:
        page = build_charts_page(range_name="week")
    elapsed = time.perf_counter() - started
    queries = _sample_queries(captured)
    assert len(captured.captured_queries) == len(queries) == 4
    for sql in queries:
        assert INDEX in _plan(sql), sql
    assert elapsed < 10  # measured ~0.1 s; a generous bound for a shared machine
    assert page.cache_choices == ["tomori_state", "user"]
    assert page.discord_choices == ["discord_members"]
    assert len(page.marks) == 2


def test_the_charts_view_renders_svg_with_data_and_marks(admin_client, samples) -> None:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(
            reverse(CHARTS), {"range": "day", "cache": ["user"]}
        )
    assert response.status_code == 200
    assert len(_sample_queries(captured)) == 4
    html = response.content.decode()
    assert html.count('class="metric-chart"') == 5
    points = dict(re.findall(r'data-series="([^"]+)" data-points="(\d+)"', html))
    for label in (
        "user",
        "RSS",
        "memory limit",
        "Python allocated blocks",
        "host available",
    ):
        assert 0 < int(points[label]) <= MAX_POINTS, label
    assert points["libvips tracked"] == "0"  # not in these samples: an empty line
    assert 'data-series="user"' in html and 'data-series="tomori_state"' not in html
    assert html.count('class="emergency-mark"') == 2 * 5  # on every chart
    assert 'value="day" checked' in html


def test_the_changelist_filtered_by_name_uses_the_index(admin_client, samples) -> None:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(reverse(CHANGELIST), {"metric_name": "host_memory"})
    assert response.status_code == 200
    queries = _sample_queries(captured)
    assert len(queries) <= 5
    page_query = next(q for q in queries if "LIMIT" in q and "ORDER BY" in q)
    assert INDEX in _plan(page_query)
    assert response.context["cl"].result_list[0].metric_name == "host_memory"


def test_the_changelist_stays_within_a_few_queries_unfiltered(
    admin_client, samples
) -> None:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(reverse(CHANGELIST))
    assert response.status_code == 200
    assert len(_sample_queries(captured)) <= 6
    assert "Charts" in response.content.decode()


def test_samples_are_read_only_and_pretty_printed(admin_client) -> None:  # type: ignore[no-untyped-def]
    sample = MetricSample.objects.create(
        metric_name="host_memory",
        fields={"mem_available_mb": 1234.5},
        created_at=timezone.now(),
    )
    change = reverse("admin:metrics_metricsample_change", args=[sample.pk])
    html = admin_client.get(change).content.decode()
    assert (
        '<pre class="metric-fields">{\n  &quot;mem_available_mb&quot;: 1234.5\n}</pre>'
        in html
    )
    assert (
        admin_client.get(reverse("admin:metrics_metricsample_add")).status_code == 403
    )
    assert admin_client.post(change, {"metric_name": "x"}).status_code == 403
    delete = reverse("admin:metrics_metricsample_delete", args=[sample.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert MetricSample.objects.get().metric_name == "host_memory"


def test_charts_need_the_view_permission(staff_client) -> None:  # type: ignore[no-untyped-def]
    assert staff_client.get(reverse(CHARTS)).status_code == 403


def test_an_empty_range_says_there_is_no_data(admin_client) -> None:  # type: ignore[no-untyped-def]
    html = admin_client.get(reverse(CHARTS), {"range": "hour"}).content.decode()
    assert html.count("no samples in this range") == 5


def _young_samples(*, source: str, ages: tuple[int, ...] = (90, 50, 10)) -> None:
    now = timezone.now()
    MetricSample.objects.bulk_create(
        MetricSample(
            metric_name="cache_sizes",
            fields={
                "worker_id": "w1",
                "user": age,
                "rss_mb": 120.0 + age,
                "memory_limit_mb": 24_000.0 if source == "host_total" else 512.0,
                "memory_limit_source": source,
                "python_allocated_blocks": 90_000,
            },
            created_at=now - timedelta(seconds=age),
        )
        for age in ages
    )


def test_the_default_range_is_fitted_to_young_data(admin_client) -> None:  # type: ignore[no-untyped-def]
    _young_samples(source="host_total")
    first = MetricSample.objects.order_by("created_at").first()
    assert first is not None
    page = build_charts_page(range_name=None)
    assert page.window.name == "fitted"
    assert page.window.since == first.created_at  # not a day of empty axis
    sizes = page.charts[0]
    assert [item.points for item in sizes.legend] == [3]
    html = admin_client.get(reverse(CHARTS)).content.decode()
    assert 'id="range-fitted" checked' in html
    assert re.search(r">\d\d:\d\d:\d\d</text>", html)  # seconds on a short axis


def test_an_old_series_keeps_the_day_and_a_chosen_range_wins() -> None:
    now = timezone.now()
    window = chart_window(None, now=now, first_sample_at=now - timedelta(days=3))
    assert (window.name, window.since) == ("day", now - timedelta(days=1))
    window = chart_window(None, now=now, first_sample_at=now - timedelta(seconds=5))
    assert (window.name, window.since) == ("fitted", now - timedelta(minutes=1))
    window = chart_window("hour", now=now, first_sample_at=now - timedelta(seconds=5))
    assert (window.name, window.since) == ("hour", now - timedelta(hours=1))


def test_without_a_container_limit_memory_is_scaled_to_the_data() -> None:
    _young_samples(source="host_total")
    memory = build_charts_page(range_name=None).charts[1]
    assert memory.title == "Process memory (MB; no container limit set)"
    assert [item.label for item in memory.legend] == ["RSS", "libvips tracked"]
    # The axis tops out near RSS (210 MB), not at the host's 24 GB.
    assert ">250</text>" in memory.svg and "24k" not in memory.svg


def test_a_container_limit_is_drawn_beside_rss() -> None:
    _young_samples(source="cgroup_v2")
    memory = build_charts_page(range_name=None).charts[1]
    assert memory.title == "Process memory vs container limit (MB)"
    assert [item.label for item in memory.legend] == [
        "RSS",
        "memory limit",
        "libvips tracked",
    ]
    assert memory.legend[1].last_value == 512.0


def test_the_fitted_default_adds_one_index_backed_query(samples) -> None:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as captured:
        page = build_charts_page(range_name=None)
    queries = _sample_queries(captured)
    assert len(captured.captured_queries) == len(queries) == 5
    for sql in queries:
        assert INDEX in _plan(sql), sql
    assert page.window.name == "day"  # two months of samples: the whole default
