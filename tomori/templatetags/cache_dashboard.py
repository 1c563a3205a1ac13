"""Filters that turn dashboard numbers into readable text: ages, durations, TTLs, counts."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from caches.operations import format_duration

register = template.Library()


@register.filter
def ago(moment: Any) -> str:
    """Return "12 s ago" for a Unix time or datetime, "—" for None."""
    if moment is None or moment == "":
        return "—"
    stamp = moment.timestamp() if isinstance(moment, datetime) else float(moment)
    return f"{format_duration(max(0.0, time.time() - stamp))} ago"


@register.filter
def duration(seconds: Any) -> str:
    """Return seconds as "45 s", "12 min", "3.5 h"."""
    return "—" if seconds is None else format_duration(float(seconds))


@register.filter
def ttl(seconds: Any) -> str:
    """Return a TTL in seconds as "10 min", or "none" when entries never expire."""
    return "none" if seconds is None else format_duration(float(seconds))


@register.filter
def num(value: Any) -> str:
    """Return a count with thousands separators, "—" for None."""
    if value is None or value == "":
        return "—"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


@register.filter
def pct(value: Any, empty: str = "—") -> str:
    """Return a percentage with one decimal, `empty` for None ("no lookups yet")."""
    return empty if value is None else f"{float(value):.1f} %"


@register.filter
def ms(value: Any, empty: str = "—") -> str:
    """Return milliseconds, "0.42 ms" to "1,234 ms", or `empty` for None.

    An empty figure says what it means (`empty`: "no invalidation applied
    yet"), never a dash and a unit.
    """
    if value is None or value == "":
        return empty
    number = float(value)
    if number < 10:
        return f"{number:.2f} ms"
    return f"{number:.1f} ms" if number < 100 else f"{number:,.0f} ms"


@register.filter
def shards(ids: Any) -> str:
    """Return shard ids as "3", "0, 1" or "0–15" (a run of three or more); "all" for None."""
    if not ids:
        return "all"
    ordered = sorted(int(i) for i in ids)
    if len(ordered) >= 3 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}–{ordered[-1]}"
    return ", ".join(map(str, ordered))


@register.filter
def caps(values: Any) -> str:
    """Return the per-worker caps of a cache: "5,000", or "1,000–5,000" when they differ."""
    if not values:
        return "uncapped"
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


@register.filter
def bar_width(value: Any) -> str:
    """Return a CSS width for a percentage bar, clamped to 0-100 %."""
    try:
        return f"{min(max(float(value), 0.0), 100.0):.1f}%"
    except (TypeError, ValueError):
        return "0%"


@register.filter
def get_item(mapping: Any, key: str) -> Any:
    """Return mapping[key], or None."""
    return mapping.get(key) if hasattr(mapping, "get") else None


@register.filter
def breakable(name: Any) -> SafeString:
    """Return `name` escaped, with a line-break opportunity after each underscore."""
    return mark_safe(escape(str(name)).replace("_", "_<wbr>"))  # noqa: S308 (escaped above)


@register.filter
def breakable_id(worker_id: Any) -> SafeString:
    """Return a worker id escaped, breakable after its colons ("host:<wbr>pid:<wbr>shard3")."""
    return mark_safe(escape(str(worker_id)).replace(":", ":<wbr>"))  # noqa: S308 (escaped above)
