"""The admin's "this save invalidated ..." message, from captured invalidation events."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any

from caches.invalidation import Captured, capture, describe_event

MAX_SHOWN_PER_CACHE = 5


def capture_invalidations() -> AbstractContextManager[Captured]:
    """Return a context that records the invalidation events raised inside it."""
    return capture()


def invalidation_message(events: Iterable[Any], *, action: str = "save") -> str | None:
    """Return "Caches invalidated by this save: user (user 42), ..." or None."""
    groups: dict[str, list[str]] = {}
    for event in events:
        phrases = groups.setdefault(event[0], [])
        phrase = describe_event(event)
        if phrase not in phrases:
            phrases.append(phrase)
    if not groups:
        return None
    parts = []
    for cache, phrases in groups.items():
        more = len(phrases) - MAX_SHOWN_PER_CACHE
        shown = "; ".join(phrases[:MAX_SHOWN_PER_CACHE])
        parts.append(f"{cache} ({shown}{f'; +{more} more' if more > 0 else ''})")
    return f"Caches invalidated by this {action}: " + ", ".join(parts) + "."
