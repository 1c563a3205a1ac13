"""Chart reads of metric_samples: downsampled series, emergency marks, recent samples.

Every query filters on `metric_name` plus a `created_at` range, so the planner
can walk the (metric_name, created_at) index, and extracts only the JSON keys
a chart plots (`fields ->> 'key'` on PostgreSQL) instead of whole blobs. The
series query buckets rows in SQL (NTILE over time order, then one
aggregate per bucket), so a week of 100,000 samples returns a few hundred
points: each bucket keeps its peak, because memory spikes are what an
operator looks for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import F, FloatField, QuerySet, Window
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Ntile
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from metrics.models import MetricSample

RANGES: dict[str, timedelta] = {
    "hour": timedelta(hours=1),
    "day": timedelta(days=1),
    "week": timedelta(days=7),
}
DEFAULT_RANGE = "day"
FITTED = "fitted"
#: The default range shrinks to the data when the data is younger than it
#: (a fresh worker's first minutes), but never below this span.
MIN_FITTED_SPAN = timedelta(minutes=1)
MAX_POINTS = 240
# Rows the memory guard and the emergency clearer write when they act.
EMERGENCY_METRICS = ("memory_emergency_entered", "emergency_cache_clear")


@dataclass(frozen=True, slots=True)
class TimeRange:
    """A chart's time range: [since, until)."""

    name: str
    since: datetime
    until: datetime


@dataclass(slots=True)
class Series:
    """One plotted line: its label, JSON key and (time, value) points."""

    key: str
    label: str
    points: list[tuple[datetime, float]] = field(default_factory=list)

    @property
    def last_value(self) -> float | None:
        """Return the newest value, or None if the series is empty."""
        return self.points[-1][1] if self.points else None


def chart_window(
    name: str | None,
    *,
    now: datetime | None = None,
    first_sample_at: datetime | None = None,
) -> TimeRange:
    """Return the time range called `name` ("hour", "day", "week") ending now.

    Without a known name it is the default range, fitted to the data when the
    data is younger: from `first_sample_at` (the oldest stored sample) to
    now, at least MIN_FITTED_SPAN long, and named "fitted".
    """
    until = now or timezone.now()
    if name in RANGES:
        return TimeRange(name=name, since=until - RANGES[name], until=until)
    since = until - RANGES[DEFAULT_RANGE]
    if first_sample_at is None or first_sample_at <= since:
        return TimeRange(name=DEFAULT_RANGE, since=since, until=until)
    since = min(first_sample_at, until - MIN_FITTED_SPAN)
    return TimeRange(name=FITTED, since=since, until=until)


def first_sample_at(metric_name: str) -> datetime | None:
    """Return when the oldest stored `metric_name` sample was taken (None: none is)."""
    return (
        MetricSample.objects.filter(metric_name=metric_name)
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )


def _in_window(metric_name: str, window: TimeRange) -> QuerySet[MetricSample]:
    return MetricSample.objects.filter(
        metric_name=metric_name,
        created_at__gte=window.since,
        created_at__lt=window.until,
    ).order_by()


def load_series(
    metric_name: str,
    keys: Sequence[str],
    *,
    window: TimeRange,
    worker_id: str | None = None,
    max_points: int = MAX_POINTS,
    labels: dict[str, str] | None = None,
) -> list[Series]:
    """Return one downsampled series per JSON key, in one query."""
    series = [Series(key=k, label=(labels or {}).get(k, k)) for k in keys]
    if not keys:
        return series
    queryset = _in_window(metric_name, window)
    if worker_id:
        queryset = queryset.filter(fields__worker_id=worker_id)
    values = {
        f"v{i}": Cast(KeyTextTransform(key, "fields"), FloatField())
        for i, key in enumerate(keys)
    }
    inner = queryset.annotate(
        bucket=Window(Ntile(max_points), order_by=F("created_at").asc()), **values
    ).values("bucket", "created_at", *values)
    sql, params = inner.query.sql_with_params()
    peaks = ", ".join(f"MAX(s.v{i})" for i in range(len(keys)))
    outer = (
        f"SELECT MIN(s.created_at), {peaks} FROM ({sql}) s "
        "GROUP BY s.bucket ORDER BY s.bucket"
    )
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(outer, params)
        rows = cursor.fetchall()
    for row in rows:
        at = _as_datetime(row[0])
        for line, value in zip(series, row[1:], strict=True):
            if value is not None:
                line.points.append((at, float(value)))
    return series


def _as_datetime(value: Any) -> datetime:
    # A raw cursor skips Django's converters: SQLite hands back text.
    if isinstance(value, datetime):
        moment = value
    else:
        moment = parse_datetime(str(value)) or datetime.fromtimestamp(0, UTC)
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=UTC)
    return moment


def emergency_marks(
    *, window: TimeRange, limit: int = 200
) -> list[tuple[datetime, str]]:
    """Return (time, metric name) of each emergency inside the window, oldest first."""
    rows = (
        MetricSample.objects.filter(
            metric_name__in=EMERGENCY_METRICS,
            created_at__gte=window.since,
            created_at__lt=window.until,
        )
        .order_by("created_at")
        .values_list("created_at", "metric_name")[:limit]
    )
    return list(rows)


def recent_fields(metric_name: str, *, limit: int = 50) -> list[dict[str, Any]]:
    """Return the `fields` of the newest samples named `metric_name`, newest first."""
    rows = (
        MetricSample.objects.filter(metric_name=metric_name)
        .order_by("-created_at")
        .values_list("fields", flat=True)[:limit]
    )
    return [fields for fields in rows if isinstance(fields, dict)]


def latest_sample(metric_name: str) -> MetricSample | None:
    """Return the newest sample named `metric_name`, or None."""
    return (
        MetricSample.objects.filter(metric_name=metric_name)
        .order_by("-created_at")
        .first()
    )
