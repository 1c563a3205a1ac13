"""The operator management commands: same service as the admin, clear failures."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.utils import timezone

from caches.registry import EmergencyPolicy, registry
from metrics.models import MetricSample
from tests.tomori.admin.conftest import TEST_CACHE
from tomori.domain.knobs import knobs

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_cache_stats_prints_each_layer_of_each_live_worker(worker) -> None:  # type: ignore[no-untyped-def]
    output = run("cache_stats")
    assert "worker w1 shards [0, 1]" in output
    line = next(line for line in output.splitlines() if line.startswith(TEST_CACHE))
    assert line.split()[:4] == [TEST_CACHE, "5", "10", "50.0%"]


def test_cache_stats_json_is_machine_readable(worker) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run("cache_stats", "--json"))
    [entry] = data["workers"]
    layer = next(layer for layer in entry["layers"] if layer["name"] == TEST_CACHE)
    assert (layer["size"], layer["cap"], layer["fill_percent"]) == (5, 10, 50.0)
    assert entry["shard_ids"] == [0, 1]


def test_cache_stats_fails_without_a_live_worker_but_shows_the_last_sample() -> None:
    MetricSample.objects.create(
        metric_name="cache_sizes",
        fields={"user": 17},
        created_at=timezone.now() - timedelta(minutes=3),
    )
    out = StringIO()
    with pytest.raises(CommandError, match="no bot worker is live"):
        call_command("cache_stats", stdout=out)
    assert "3 min old" in out.getvalue() and "17" in out.getvalue()


def test_invalidate_cache_clears_a_cache_on_the_worker(worker, test_cache) -> None:  # type: ignore[no-untyped-def]
    output = run("invalidate_cache", TEST_CACHE)
    assert "worker w1 (shards 0, 1): removed 5 entries" in output
    assert len(test_cache) == 0


def test_clearing_a_preserved_or_expired_only_cache_by_hand_is_refused(
    worker, test_cache
) -> None:  # type: ignore[no-untyped-def]
    registry.register(TEST_CACHE, test_cache, policy=EmergencyPolicy.EXPIRED_ONLY)
    with pytest.raises(CommandError, match="not cleared by hand"):
        run("invalidate_cache", TEST_CACHE)
    assert len(test_cache) == 5


def test_a_command_for_one_worker_runs_there_or_names_the_live_ones(
    worker, test_cache
) -> None:  # type: ignore[no-untyped-def]
    output = run("invalidate_cache", TEST_CACHE, "--worker", "w1")
    assert f"clear cache {TEST_CACHE} on worker w1: worker w1 answered" in output
    assert len(test_cache) == 0
    with pytest.raises(
        CommandError, match="worker 'gone' is not live.*live workers: w1"
    ):
        run("emergency_clear", "--yes", "--worker", "gone")
    assert worker.context.commands_run == 1  # nothing was sent for "gone"


def test_invalidate_cache_key_drops_one_key(worker, test_cache) -> None:  # type: ignore[no-untyped-def]
    output = run("invalidate_cache", TEST_CACHE, "--key", "2")
    assert "removed 1 entry" in output
    assert 2 not in test_cache and len(test_cache) == 4


def test_invalidate_cache_rejects_an_unknown_name(worker, test_cache) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match="unknown cache 'nope'"):
        run("invalidate_cache", "nope")
    with pytest.raises(CommandError, match="unknown cache 'nope'"):
        run("invalidate_cache", "nope", "--key", "1")
    assert len(test_cache) == 5


def test_invalidate_cache_rejects_a_bad_key(worker, test_cache) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(
        CommandError, match="is not an integer id.*expected: an integer id"
    ):
        run("invalidate_cache", TEST_CACHE, "--key", "abc")
    assert len(test_cache) == 5


def test_commands_fail_when_no_worker_answers(bus_channel, test_cache) -> None:  # type: ignore[no-untyped-def]
    for args in (
        ("invalidate_cache", TEST_CACHE, "--timeout", "0.5"),
        ("emergency_clear", "--yes", "--timeout", "0.5"),
        ("refresh_catalogs", "--timeout", "0.5"),
    ):
        with pytest.raises(CommandError, match="no worker answered within 0.5 s"):
            run(*args)
    assert len(test_cache) == 5


def test_emergency_clear_runs_on_the_worker(
    worker, test_cache, _no_metric_rows
) -> None:  # type: ignore[no-untyped-def]
    output = run("emergency_clear", "--yes")
    assert "clears: " in output and TEST_CACHE in output
    assert "preserves: " in output and "llm" in output
    assert "worker w1 (shards 0, 1): removed 5 entries" in output
    assert len(test_cache) == 0
    [(_, fields)] = _no_metric_rows
    assert fields["include_stm"] is False


def test_emergency_clear_include_stm_is_passed_on(worker, _no_metric_rows) -> None:  # type: ignore[no-untyped-def]
    run("emergency_clear", "--include-stm", "--yes")
    [(_, fields)] = _no_metric_rows
    assert fields["include_stm"] is True


def test_refresh_catalogs_reports_each_catalog(worker) -> None:  # type: ignore[no-untyped-def]
    output = run("refresh_catalogs", "--fresh")
    assert "catalogs: text ok, embedding ok" in output
    assert [c.calls for c in worker.context.catalogs] == [[True], [True]]
    run("refresh_catalogs")
    assert [c.calls for c in worker.context.catalogs] == [[True, False], [True, False]]


def test_a_failing_worker_makes_the_command_fail(worker) -> None:  # type: ignore[no-untyped-def]
    worker.context.catalogs = None
    with pytest.raises(CommandError, match="refresh catalogs: failed on a worker"):
        run("refresh_catalogs")


@override_settings(METRIC_SAMPLE_RETENTION_DAYS=30)
def test_prune_metric_samples_dry_run_counts_and_prune_deletes() -> None:
    now = timezone.now()
    for days in (40, 35, 10):
        MetricSample.objects.create(
            metric_name="cache_sizes", fields={}, created_at=now - timedelta(days=days)
        )
    assert "would delete 2 sample(s) older than 30 days" in run(
        "prune_metric_samples", "--dry-run"
    )
    assert MetricSample.objects.count() == 3
    assert "deleted 2 sample(s)" in run("prune_metric_samples")
    assert MetricSample.objects.count() == 1


def test_cache_stats_shows_each_caches_bytes_without_metrics_port(  # type: ignore[no-untyped-def]
    test_cache, settings
) -> None:
    from caches import live
    from caches.operations import WorkerContext
    from tomori.bot.worker import BotWorker, WorkerOptions

    settings.METRICS_PORT = None  # no endpoint: the worker estimates by itself
    bot = BotWorker(WorkerOptions(worker_id="w-bytes"))
    bot.context = WorkerContext(worker_id="w-bytes")
    estimates = asyncio.run(bot.cache_bytes.refresh())  # its loop-side timer's step
    live.publish_snapshot("w-bytes", bot._build_snapshot())
    try:
        [entry] = json.loads(run("cache_stats", "--json"))["workers"]
        table = run("cache_stats")
    finally:
        live.withdraw_snapshot("w-bytes")
    layer = next(layer for layer in entry["layers"] if layer["name"] == TEST_CACHE)
    assert layer["bytes_estimate"] == estimates[TEST_CACHE] > 5 * len("value 1")
    line = next(line for line in table.splitlines() if line.startswith(TEST_CACHE))
    assert line.split()[1] == "5"
    assert line.split()[-2:] == [str(estimates[TEST_CACHE]), "B"]


def test_cache_stats_says_a_composite_cap_is_the_sum_of_its_maps(worker) -> None:  # type: ignore[no-untyped-def]
    lines = run("cache_stats").splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("tomori_state "))
    cap = int(knobs().TOMORI_STATE_CACHE_MAX_ENTRIES)
    assert lines[row].split()[2] == f"{3 * cap:,}"
    assert lines[row + 1] == (
        f"  cap {3 * cap:,} = sum of 3 maps: main {cap:,} (0 held), "
        f"last good {cap:,} (0 held), errors {cap:,} (0 held)"
    )
    user = next(i for i, line in enumerate(lines) if line.startswith("user "))
    assert "sum of" not in lines[user + 1]  # one map: nothing to explain
