"""The Grafana dashboard: its SQL runs on real metric_samples rows, its parts fit together."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal

import discord
import pytest
from django.db import connection
from django.utils import timezone

from caches.memory.emergency import clear_emergency_caches
from caches.memory.guard import MemoryGuard
from caches.memory.readers import HostMemorySampler
from caches.registry import registry
from metrics.logger import BackgroundMetricWriter, CacheMetricsLogger, default_writer
from metrics.models import MetricSample
from metrics.repository import MetricSampleRepository
from tests.metrics.scraping import (
    DASHBOARD,
    POSTGRES_UID,
    PROMETHEUS_UID,
    ROOT,
    dashboard,
    prometheus_exprs,
    promql_metric_names,
    sql_queries,
)

HOST = ROOT / "tests" / "caches" / "memory" / "fixtures" / "hosts" / "normal"
WORKER = "grafana-test:1:shard0"


def _write_samples() -> None:
    """Write cache_sizes, host_memory and both emergency rows through the real code."""
    import pyvips  # noqa: F401 (a worker has libvips loaded: its figures are in the row)

    from caches.layers import load_all

    load_all()
    registry.get("user").set(1, "user row")
    writer = BackgroundMetricWriter(MetricSampleRepository())
    sampler = HostMemorySampler(proc_root=HOST / "proc", sys_root=HOST / "sys")
    client = discord.Client(intents=discord.Intents.none())  # not connected: counts 0
    metrics_logger = CacheMetricsLogger(
        interval_seconds=1,
        worker_id=WORKER,
        client_getter=lambda: client,
        host_sampler=sampler,
        writer=writer,
    )
    metrics_logger.sample()
    metrics_logger.sample()
    guard = MemoryGuard(
        limit_bytes=100,
        warning_threshold=0.7,
        critical_threshold=0.8,
        cooldown_seconds=60,
        rss_source=lambda: 99,
        collect=lambda: None,
        on_metric=lambda name, fields: writer.submit(name, fields),
    )
    guard.check()
    clear_emergency_caches(source="grafana-test", collect_before_measuring=False)
    assert writer.flush(10) and default_writer().flush(10)
    names = set(MetricSample.objects.values_list("metric_name", flat=True))
    assert names >= {
        "cache_sizes",
        "host_memory",
        "memory_emergency_entered",
        "emergency_cache_clear",
    }


def _grafana_to_sql(query: str, since: datetime, until: datetime) -> str:
    """Expand the Grafana macros and variables the dashboard uses."""
    text = re.sub(
        r"\$__timeFilter\(([^)]+)\)",
        lambda m: (
            f"{m.group(1)} BETWEEN '{since.isoformat()}' AND '{until.isoformat()}'"
        ),
        query,
    )
    text = text.replace("$worker", f"'{WORKER}'")
    assert "$" not in text, f"an unexpanded Grafana macro or variable in:\n{text}"
    return text


def _is_number(value: object) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _check_time_series(columns: list[str], rows: list[tuple]) -> None:
    assert columns[0] == "time" and all(isinstance(r[0], datetime) for r in rows)
    value_columns = [c for c in columns[1:] if c != "metric"]
    assert value_columns, columns
    for index, name in enumerate(columns):
        if name in value_columns:
            values = [row[index] for row in rows if row[index] is not None]
            assert values and all(map(_is_number, values)), (name, rows[:3])


def _check_annotation(columns: list[str], rows: list[tuple]) -> None:
    assert columns[:3] == ["time", "text", "tags"], columns
    texts = [row[1] for row in rows]
    assert any("entries cleared" in t for t in texts), texts
    assert any("% of the limit" in t for t in texts), texts


@pytest.mark.django_db(transaction=True)
def test_every_dashboard_sql_query_returns_rows_from_real_samples(postgres) -> None:  # type: ignore[no-untyped-def]
    _write_samples()
    now = timezone.now()
    queries = sql_queries()
    assert {fmt for fmt, _ in queries} == {"time_series", "table", "variable"}
    for fmt, query in queries:
        with connection.cursor() as cursor:
            cursor.execute(_grafana_to_sql(query, now - timedelta(hours=1), now))
            columns = [column.name for column in cursor.description]
            rows = cursor.fetchall()
        assert rows, f"no rows from:\n{query}"
        if fmt == "time_series":
            _check_time_series(columns, rows)
        elif fmt == "table":
            _check_annotation(columns, rows)
        else:
            assert len(columns) == 1 and (WORKER,) in rows


@pytest.mark.django_db(transaction=True)
def test_the_cache_sizes_query_reads_caches_only(postgres) -> None:  # type: ignore[no-untyped-def]
    _write_samples()
    [query] = [q for _, q in sql_queries() if "kv.key !~" in q]
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(_grafana_to_sql(query, now - timedelta(hours=1), now))
        rows = cursor.fetchall()
    series = {metric.removeprefix(WORKER + " ") for _, metric, _ in rows}
    assert "user" in series and "tomori_state" in series
    assert not {s for s in series if s.startswith(("rss_", "discord_", "memory_"))}
    assert "cache_entries_total" not in series
    assert {v for _, m, v in rows if m.endswith(" user")} == {1.0}


def test_rows_outside_the_time_range_are_left_out() -> None:
    query = sql_queries()[0][1]
    since = datetime(2001, 1, 1, tzinfo=timezone.get_current_timezone())
    text = _grafana_to_sql(query, since, since + timedelta(hours=1))
    assert "BETWEEN '2001-01-01T00:00:00+00:00' AND '2001-01-01T01:00:00+00:00'" in text


def test_panels_have_unique_ids_known_data_sources_and_fit_the_grid() -> None:
    board = dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    uids = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["targets"] and all("refId" in t for t in panel["targets"])
        uids.add(panel["datasource"]["uid"])
        assert {t["datasource"]["uid"] for t in panel["targets"]} == {
            panel["datasource"]["uid"]
        }
    assert uids == {PROMETHEUS_UID, POSTGRES_UID}


def test_provisioning_names_the_data_sources_the_dashboard_uses() -> None:
    provisioning = DASHBOARD.parent / "provisioning"
    sources = (provisioning / "datasources" / "tomori.yaml").read_text()
    assert f"uid: {PROMETHEUS_UID}" in sources and "type: prometheus" in sources
    assert f"uid: {POSTGRES_UID}" in sources and "type: postgres" in sources
    providers = (provisioning / "dashboards" / "tomori.yaml").read_text()
    assert re.search(r"path: /\S+", providers)


def test_every_promql_expression_names_tomori_metrics_only() -> None:
    names = set().union(*map(promql_metric_names, prometheus_exprs()))
    assert names and all(name.startswith("tomori_") for name in names), names


def test_the_promql_name_extractor_skips_functions_labels_and_keywords() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(a_bucket{x=~"$i", y="b c"}'
        "[$__rate_interval]))) / clamp_min(b_total * on (instance) group_left c, 1e-9)"
    )
    assert promql_metric_names(expr) == {"a_bucket", "b_total", "c"}
    assert promql_metric_names("label_values(tomori_worker_info, instance)") == {
        "tomori_worker_info"
    }
