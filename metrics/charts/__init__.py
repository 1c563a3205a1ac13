"""metric_samples charts: downsampled index-friendly queries rendered as inline SVG."""

from metrics.charts.page import ChartsPage, build_charts_page, size_fields
from metrics.charts.queries import (
    EMERGENCY_METRICS,
    FITTED,
    MAX_POINTS,
    RANGES,
    Series,
    TimeRange,
    chart_window,
    emergency_marks,
    first_sample_at,
    latest_sample,
    load_series,
    recent_fields,
)
from metrics.charts.svg import Chart, render_chart

__all__ = [
    "EMERGENCY_METRICS",
    "FITTED",
    "MAX_POINTS",
    "RANGES",
    "Chart",
    "ChartsPage",
    "Series",
    "TimeRange",
    "build_charts_page",
    "chart_window",
    "emergency_marks",
    "first_sample_at",
    "latest_sample",
    "load_series",
    "recent_fields",
    "render_chart",
    "size_fields",
]
