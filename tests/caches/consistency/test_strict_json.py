"""What the worker logs as JSON or exports parses strictly: no NaN, no Infinity, for any record."""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from caches import live
from caches.consistency import NINES_CAP, CacheConsistency
from caches.core import finite_json
from caches.operations import WorkerContext
from metrics.logger import emit_metric
from metrics.prometheus.families import consistency_families
from metrics.snapshot import cache_sizes_row
from tomori.bot.worker import BotWorker, WorkerOptions

RECORDS: dict[str, dict[str, CacheConsistency]] = {
    "perfect": {"tomori_state": CacheConsistency(checked=40)},
    "inconsistent": {
        "tomori_state": CacheConsistency(checked=40, inconsistent=3, repairs=3),
        "user": CacheConsistency(checked=7),
        "st_preset": CacheConsistency(),  # nothing checked yet
    },
}


def strict(text: str | bytes) -> Any:
    """Parse as JSON the way a strict parser does: NaN and Infinity are errors."""

    def reject(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=reject)


def test_the_strict_parser_rejects_what_python_writes_for_non_finite_numbers() -> None:
    for number in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError, match="not JSON"):
            strict(json.dumps({"x": number}))
        assert strict(finite_json.dumps({"x": [number]})) == {"x": [None]}
        with pytest.raises(ValueError, match="not JSON"):
            finite_json.loads(json.dumps(number))


@pytest.fixture(params=sorted(RECORDS))
def worker(request: pytest.FixtureRequest, settings: Any) -> Iterator[BotWorker]:
    """A worker (not started) whose consistency watcher holds one record."""
    settings.METRICS_PORT = None
    bot = BotWorker(WorkerOptions(worker_id=f"w-json-{request.param}"))
    bot.context = WorkerContext(worker_id=bot.worker_id)
    bot.consistency.caches = dict(RECORDS[request.param])
    yield bot


def _lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


def test_the_shutdown_summary_parses(
    worker: BotWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    worker.consistency.log_summary()  # what shutdown() logs
    [line] = _lines(caplog, "caches.consistency")
    summary = strict(line.split("consistency checks: ", 1)[1])
    state = summary["tomori_state"]
    if state["inconsistent"]:
        assert state["nines"] == pytest.approx(-math.log10(3 / 40))
        assert state["repairs"] == 3
        assert summary["st_preset"]["nines"] is None
    else:
        assert state["nines"] == NINES_CAP  # a perfect record: the finite cap


def test_the_published_worker_snapshot_parses(
    worker: BotWorker, settings: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.REDIS_URL = redis_url
    settings.TOMORI_BUS_CHANNEL = f"tomori:test-json:{uuid.uuid4().hex}"
    monkeypatch.setattr(live, "_redis_client", None)
    assert live.publish_snapshot(worker.worker_id, worker._build_snapshot())
    try:
        raw = redis.Redis.from_url(redis_url).get(live.key_prefix() + worker.worker_id)
    finally:
        live.withdraw_snapshot(worker.worker_id)
    assert raw is not None
    published = strict(raw)["consistency"]
    assert published == strict(finite_json.dumps(worker.consistency.summary()))


def test_metric_log_lines_parse(
    worker: BotWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    emit_metric("cache_sizes", cache_sizes_row(worker._build_snapshot()), db=False)
    emit_metric(
        "probe", {"lag": math.nan, "ratio": math.inf, "n": [-math.inf]}, db=False
    )
    cache_sizes, probe = (strict(line) for line in _lines(caplog, "tomori.metrics"))
    assert cache_sizes["metric"] == "cache_sizes"
    assert probe["lag"] is None and probe["ratio"] is None and probe["n"] == [None]


class _Families(Collector):
    def __init__(self, worker: BotWorker) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Any]:
        yield from consistency_families(self.worker.consistency.summary())


def test_the_prometheus_figures_are_finite_and_match_the_log(worker: BotWorker) -> None:
    registry = CollectorRegistry()
    registry.register(_Families(worker))
    text = generate_latest(registry).decode()
    values = [s.value for f in text_string_to_metric_families(text) for s in f.samples]
    assert values and all(math.isfinite(v) for v in values), text
    summary = worker.consistency.summary()["tomori_state"]
    assert registry.get_sample_value(
        "tomori_consistency_nines", {"cache": "tomori_state"}
    ) == pytest.approx(summary["nines"])
    assert registry.get_sample_value(
        "tomori_consistency_repairs_total", {"cache": "tomori_state"}
    ) == float(summary["repairs"])
