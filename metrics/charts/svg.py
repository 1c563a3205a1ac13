"""Server-rendered SVG line charts: no JavaScript, no external assets."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from metrics.charts.queries import Series, TimeRange

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
MARK_COLOUR = "#c0392b"
#: Ranges up to this many seconds (a fitted range) label the axis with seconds.
SECONDS_ON_AXIS = 15 * 60


@dataclass(frozen=True, slots=True)
class Frame:
    """The plotting area inside the SVG and the data ranges it maps."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    since: float
    until: float
    y_max: float

    def x(self, at: datetime) -> float:
        """Return the x pixel of a time."""
        span = max(self.until - self.since, 1e-9)
        inner = self.width - self.left - self.right
        return self.left + inner * (at.timestamp() - self.since) / span

    def y(self, value: float) -> float:
        """Return the y pixel of a value."""
        inner = self.height - self.top - self.bottom
        return self.top + inner * (1 - value / self.y_max)


@dataclass(frozen=True, slots=True)
class LegendItem:
    """A series' colour, label and newest value, for the HTML legend."""

    label: str
    colour: str
    last_value: float | None
    points: int


@dataclass(frozen=True, slots=True)
class Chart:
    """A rendered chart: its title, SVG markup and legend."""

    title: str
    unit: str
    svg: SafeString
    legend: list[LegendItem]
    empty: bool


def nice_ceiling(value: float) -> float:
    """Return a round number (1, 2, 2.5, 5 x 10^n) at or above `value`."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        candidate = step * 10**exponent
        if candidate >= value:
            return candidate
    return 10.0 ** (exponent + 1)


def format_number(value: float) -> str:
    """Return a compact label: 1234567 -> 1.2M, 2500 -> 2.5k, 0.25 -> 0.25."""
    magnitude = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def render_chart(
    series: Sequence[Series],
    *,
    window: TimeRange,
    title: str,
    unit: str = "",
    marks: Sequence[tuple[datetime, str]] = (),
    width: int = 760,
    height: int = 220,
) -> Chart:
    """Render series as an SVG line chart with emergency marks on the time axis."""
    peak = max((v for s in series for _, v in s.points), default=0.0)
    frame = Frame(
        width=width,
        height=height,
        left=58,
        right=12,
        top=12,
        bottom=26,
        since=window.since.timestamp(),
        until=window.until.timestamp(),
        y_max=nice_ceiling(peak * 1.05),
    )
    colours = [PALETTE[i % len(PALETTE)] for i in range(len(series))]
    empty = not any(s.points for s in series)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="metric-chart" '
        f'viewBox="0 0 {width} {height}" width="100%" role="img" '
        f'aria-label="{escape(title)}">',
        *_grid(frame),
        *_time_axis(frame, window),
        *(_line(frame, s, c) for s, c in zip(series, colours, strict=True)),
        *(_mark(frame, at, name) for at, name in marks),
    ]
    if empty:
        parts.append(
            f'<text x="{width / 2:.0f}" y="{height / 2:.0f}" text-anchor="middle" '
            'class="no-data" fill="#888">no samples in this range</text>'
        )
    parts.append("</svg>")
    legend = [
        LegendItem(s.label, c, s.last_value, len(s.points))
        for s, c in zip(series, colours, strict=True)
    ]
    svg = mark_safe("".join(parts))  # noqa: S308 (every interpolated text is escaped)
    return Chart(title=title, unit=unit, svg=svg, legend=legend, empty=empty)


def _grid(frame: Frame) -> list[str]:
    lines = []
    for step in range(5):
        value = frame.y_max * step / 4
        y = frame.y(value)
        lines.append(
            f'<line x1="{frame.left}" x2="{frame.width - frame.right}" '
            f'y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e3e3" />'
            f'<text x="{frame.left - 6}" y="{y + 4:.1f}" text-anchor="end" '
            f'font-size="11" fill="#666">{escape(format_number(value))}</text>'
        )
    return lines


def _time_axis(frame: Frame, window: TimeRange) -> list[str]:
    span = (window.until - window.since).total_seconds()
    pattern = (
        "%a %d %H:%M"
        if window.name == "week"
        else "%H:%M:%S"
        if span <= SECONDS_ON_AXIS
        else "%H:%M"
    )
    ticks = []
    base = frame.height - frame.bottom
    for step in range(6):
        moment = window.since + (window.until - window.since) * step / 5
        x = frame.x(moment)
        anchor = "start" if step == 0 else "end" if step == 5 else "middle"
        ticks.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{base}" y2="{base + 4}" '
            f'stroke="#999" /><text x="{x:.1f}" y="{base + 17}" font-size="11" '
            f'text-anchor="{anchor}" fill="#666">{moment:{pattern}}</text>'
        )
    ticks.append(
        f'<line x1="{frame.left}" x2="{frame.width - frame.right}" y1="{base}" '
        f'y2="{base}" stroke="#999" />'
    )
    return ticks


def _line(frame: Frame, series: Series, colour: str) -> str:
    coords = " ".join(f"{frame.x(at):.1f},{frame.y(v):.1f}" for at, v in series.points)
    label = escape(series.label)
    body = (
        f'<polyline class="series" data-series="{label}" '
        f'data-points="{len(series.points)}" fill="none" stroke="{colour}" '
        f'stroke-width="1.6" stroke-linejoin="round" points="{coords}">'
        f"<title>{label}</title></polyline>"
    )
    if series.points:  # a lone point draws no line: mark the newest one
        at, value = series.points[-1]
        body += (
            f'<circle cx="{frame.x(at):.1f}" cy="{frame.y(value):.1f}" r="2.5" '
            f'fill="{colour}"><title>{label}: {escape(format_number(value))}'
            "</title></circle>"
        )
    return body


def _mark(frame: Frame, at: datetime, name: str) -> str:
    x = frame.x(at)
    return (
        f'<line class="emergency-mark" x1="{x:.1f}" x2="{x:.1f}" y1="{frame.top}" '
        f'y2="{frame.height - frame.bottom}" stroke="{MARK_COLOUR}" '
        f'stroke-width="1.2" stroke-dasharray="4 3"><title>{escape(name)} at '
        f"{at:%Y-%m-%d %H:%M:%S} UTC</title></line>"
    )
