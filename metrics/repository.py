"""metric_samples writes: fire-and-forget inserts with retention riding the write path.

The spec's rules: a telemetry sample must never break the interval that
produces it, so `record_sample` never raises; it is not retried, because a
retry adds load to a pool at exactly the moment the pool is failing; and
retention is pruned after a successful insert, at most once per
METRIC_SAMPLE_PRUNE_INTERVAL_MS, because no scheduler is guaranteed to run.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

from caches.core.finite_json import finite
from metrics.log import log_metric
from metrics.models import MetricSample
from tomori.domain.knobs import knobs

logger = logging.getLogger(__name__)


class MetricSampleRepository:
    """Insert metric samples and prune old ones; never raise to the caller."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = timezone.now,
    ) -> None:
        self._clock = clock
        self._now = now
        self._lock = threading.Lock()
        self._last_prune: float | None = None
        self._failing_since: float | None = None
        self.inserted = 0
        self.failures = 0
        self.pruned = 0

    def record_sample(self, name: str, fields: dict[str, Any]) -> bool:
        """Insert one sample; return whether it was stored. Never raises."""
        try:
            MetricSample.objects.create(
                metric_name=name, fields=finite(fields), created_at=self._now()
            )
        except Exception as exc:  # noqa: BLE001 (telemetry must never raise)
            self._record_failure(name, exc)
            return False
        self._record_success()
        self._maybe_prune()
        return True

    def prune(self) -> int:
        """Delete samples older than METRIC_SAMPLE_RETENTION_DAYS; return how many."""
        cutoff = self._now() - timedelta(days=knobs().METRIC_SAMPLE_RETENTION_DAYS)
        deleted, _ = MetricSample.objects.filter(created_at__lt=cutoff).delete()
        self.pruned += deleted
        return deleted

    def count_prunable(self) -> int:
        """Return how many samples a prune would delete now."""
        cutoff = self._now() - timedelta(days=knobs().METRIC_SAMPLE_RETENTION_DAYS)
        return MetricSample.objects.filter(created_at__lt=cutoff).count()

    def _maybe_prune(self) -> None:
        interval = knobs().METRIC_SAMPLE_PRUNE_INTERVAL_MS / 1000
        now = self._clock()
        with self._lock:
            if self._last_prune is not None and now - self._last_prune < interval:
                return
            self._last_prune = now
        try:
            deleted = self.prune()
        except Exception as exc:  # noqa: BLE001
            logger.warning("metric_samples prune failed: %s", exc)
            return
        if deleted:
            logger.info("pruned %d metric_samples rows", deleted)

    def _record_failure(self, name: str, exc: BaseException) -> None:
        self.failures += 1
        close_old_connections()  # a broken connection must not poison the next try
        with self._lock:
            first = self._failing_since is None
            if first:
                self._failing_since = self._clock()
        if first:
            log_metric(
                "metric_sink_failure",
                {
                    "sink": "metric_samples",
                    "metric_name": name,
                    "error": type(exc).__name__,
                },
            )
            logger.warning("metric_samples insert failed (%s); not retried", exc)

    def _record_success(self) -> None:
        self.inserted += 1
        with self._lock:
            recovered = self._failing_since is not None
            self._failing_since = None
        if recovered:
            logger.info("metric_samples inserts work again")

    @property
    def failing(self) -> bool:
        """Whether the sink is in an outage (the last insert failed)."""
        return self._failing_since is not None


default_repository = MetricSampleRepository()


def record_sample(name: str, fields: dict[str, Any]) -> bool:
    """Insert one sample through the default repository. Never raises."""
    return default_repository.record_sample(name, fields)


def record_sample_in_background(
    name: str,
    fields: dict[str, Any],
    *,
    repository: MetricSampleRepository | None = None,
) -> asyncio.Future[bool]:
    """Insert from the event loop without blocking it (fire-and-forget)."""
    repo = repository or default_repository
    loop = asyncio.get_running_loop()
    return loop.run_in_executor(None, _insert_in_thread, repo, name, fields)


def _insert_in_thread(
    repo: MetricSampleRepository, name: str, fields: dict[str, Any]
) -> bool:
    try:
        return repo.record_sample(name, fields)
    finally:
        close_old_connections()
