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
def pct(value: Any) -> str:
    """Return a percentage with one decimal, "—" for None."""
    return "—" if value is None else f"{float(value):.1f} %"


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
