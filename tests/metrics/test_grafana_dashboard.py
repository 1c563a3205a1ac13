"""The Grafana dashboard: its SQL runs on real metric_samples rows, its parts fit together."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
from tests.metrics.alert_rules import alerts
from tests.metrics.prometheus_server import PrometheusServer, config_for
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
from tests.metrics.test_runbot_metrics import ENV, SIM, _endpoint, _ready, _seed
from tests.support.faults import wait_until
from tests.tomori.bot.worker.conftest import test_database_url as worker_database_url
from tomori.domain.models import Server

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


# -- Every PromQL expression, against a real Prometheus scraping a real worker --

#: Panel queries with no data unless an event happened that this test does not
#: cause: a repair needs an inconsistency (a write behind the caches' back).
NO_DATA_WITHOUT_AN_EVENT = {
    "tomori_consistency_repairs_total": "a repair needs a confirmed inconsistency",
}
#: Grafana's $__rate_interval for a 1 s scrape (4 x the scrape interval, rounded up).
RATE_INTERVAL = "15s"


def _as_promql(expr: str) -> str:
    """Expand the dashboard's Grafana variables as Grafana would for "All"."""
    text = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$instance", ".*")
    assert "$" not in text, text
    return text


def _allowed_empty(expr: str) -> bool:
    return bool(promql_metric_names(expr) & NO_DATA_WITHOUT_AN_EVENT.keys())


def _traffic_reached_every_panel(prometheus: PrometheusServer) -> bool:
    return all(
        prometheus.query(_as_promql(expr))
        for expr in prometheus_exprs()
        if not expr.startswith("label_values(") and not _allowed_empty(expr)
    )


def _operator(*args: str) -> None:
    """Run a management command in a process of its own, as the worker's env does."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "DATABASE_URL": worker_database_url(),
    }
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_real_prometheus_answers_every_dashboard_and_alert_expression(
    run_bot, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    _seed()
    bot = run_bot(*SIM, env=ENV)
    worker = _endpoint(bot)
    _ready(worker)
    target = worker.removeprefix("http://")
    prometheus = PrometheusServer(config_for(target), tmp_path)
    try:
        prometheus.wait_ready()
        # Scraped once before the events below, so that increase() sees them.
        assert wait_until(
            lambda: prometheus.query("tomori_emergency_clears_total"), timeout=30
        ), prometheus.output()
        for server in Server.objects.all()[:3]:  # invalidations: the lag histogram
            server.save()
        # The emergency panel, sent as an operator would, from a process of its
        # own on the worker's bus (this process's bus is the tests' to set).
        # A loaded machine may answer after the default 3 s.
        _operator("emergency_clear", "--yes", "--timeout", "30")
        assert wait_until(
            lambda: _traffic_reached_every_panel(prometheus), timeout=90, interval=1
        ), _missing(prometheus)
        _check_every_expression(prometheus, target)
        _check_idle_caches_have_no_hit_ratio(prometheus)
        _check_the_rules_evaluate(prometheus, {a.name for a in alerts()})
        for alert in alerts():
            prometheus.query(alert.expr)  # no error (firing or not)
    finally:
        prometheus.stop()


def _missing(prometheus: PrometheusServer) -> list[str]:
    return [
        expr
        for expr in prometheus_exprs()
        if not expr.startswith("label_values(")
        and not _allowed_empty(expr)
        and not prometheus.query(_as_promql(expr))
    ] + [prometheus.output()[-2000:]]


def _check_every_expression(prometheus: PrometheusServer, target: str) -> None:
    exprs = prometheus_exprs()
    assert len(exprs) > 40
    for expr in exprs:
        variable = re.fullmatch(r"label_values\((\w+), (\w+)\)", expr)
        if variable:
            name, label = variable.groups()
            values = prometheus.api(f"label/{label}/values", **{"match[]": name})
            assert target in values, (expr, values)
            continue
        result = prometheus.query(_as_promql(expr))  # an error fails in api()
        assert result or _allowed_empty(expr), expr


def _check_idle_caches_have_no_hit_ratio(prometheus: PrometheusServer) -> None:
    [hit_ratio] = [e for e in prometheus_exprs() if "tomori_cache_hits_total" in e]
    assert "clamp_min" not in hit_ratio
    reads = prometheus.query(
        _as_promql(
            "sum by (cache) (rate(tomori_cache_hits_total[$__rate_interval])"
            " + rate(tomori_cache_misses_total[$__rate_interval]))"
        )
    )
    idle = {r["metric"]["cache"] for r in reads if float(r["value"][1]) == 0}
    busy = {r["metric"]["cache"] for r in reads} - idle
    assert idle and busy, reads
    ratios = {
        r["metric"]["cache"]: r["value"][1]
        for r in prometheus.query(_as_promql(hit_ratio))
    }
    assert {ratios[cache] for cache in idle} == {"NaN"}, ratios  # no data, not 0 %
    assert all(0 <= float(ratios[cache]) <= 1 for cache in busy), ratios


def _check_the_rules_evaluate(prometheus: PrometheusServer, names: set[str]) -> None:
    def evaluated() -> list[dict]:  # type: ignore[type-arg]
        groups = prometheus.api("rules", type="alert")["groups"]
        return [rule for group in groups for rule in group["rules"]]

    assert wait_until(
        lambda: all(r["health"] == "ok" for r in evaluated()), timeout=30, interval=1
    ), evaluated()
    rules = evaluated()
    assert {rule["name"] for rule in rules} == names
    for rule in rules:
        assert rule["annotations"]["runbook_url"].startswith("docs/runbook.md#")
    firing = {r["name"] for r in rules if r["state"] != "inactive"}
    assert "TomoriEmergencyClears" in firing, firing  # the clear above
    assert not {"TomoriWorkerDown", "TomoriBusDisconnected"} & firing, firing
