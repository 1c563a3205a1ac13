"""Describe invalidation events in words, for admin messages and logs.

The words are the layers' own (each operation declares its phrase, see
`caches.layers.declaration`). An event naming no declared layer or operation
(a catalog's, or one from a newer release on the bus) is spelled out as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from caches.registry import Event, UnknownCacheError, UnknownOperationError


def describe_event(event: Event | tuple[str, str, tuple[Any, ...]]) -> str:
    """Return one event in words ("Tomori state of server 123")."""
    from caches.layers import declared

    name, op, args = event
    try:
        return declared(name).phrase(op, tuple(args))
    except (UnknownCacheError, UnknownOperationError, TypeError, ValueError):
        pass
    if op == "all":
        return f"every entry of the {name} cache"
    return f"{name}: {op}({', '.join(map(repr, args))})"


def describe(events: Iterable[Event | tuple[str, str, tuple[Any, ...]]]) -> list[str]:
    """Return each event in words, in order, without repeats."""
    return list(dict.fromkeys(describe_event(event) for event in events))
