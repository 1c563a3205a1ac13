"""Markdown table render cache (spec 13): message id -> the original markdown.

Read by history builders (so the model sees the table's text, not an image)
and by the message's "Show Markdown" button. The button's timeout must not
exceed this cache's ttl (start-up check in `tomori.knobs`), and an entry gone
anyway answers EXPIRED, which the button shows as the expired notice.
"""

from __future__ import annotations

from caches.layers._feeds import NotFed
from caches.layers._message_keyed import (
    MESSAGE_KEY,
    Lookup,
    LookupStatus,
    MessageKeyedCache,
    build_message_keyed,
)
from caches.layers.declaration import Layer, LayerSettings, unbuilt
from caches.registry import EmergencyPolicy
from tomori.knobs import knobs

NAME = "markdown_table"

CAP_SETTING = "MARKDOWN_TABLE_CACHE_MAX_ENTRIES"
TTL_SETTING = "MARKDOWN_TABLE_CACHE_TTL_MINUTES"

_cache: MessageKeyedCache[str] = unbuilt(NAME)  # set by _build


def _build(config: LayerSettings) -> MessageKeyedCache[str]:
    """Build the layer's cache from its settings."""
    global _cache
    _cache = build_message_keyed(
        NAME, config, cap_setting=CAP_SETTING, ttl_setting=TTL_SETTING
    )
    return _cache


def markdown_table_cache() -> MessageKeyedCache[str]:
    """Return this process's markdown table cache (tests, metrics)."""
    return _cache


def markdown_button_timeout_seconds() -> float:
    """Return the "Show Markdown" button's timeout (never beyond the cache ttl)."""
    return knobs().MARKDOWN_TABLE_BUTTON_TIMEOUT_MS / 1000.0


def cache_markdown_table(message_disc_id: int, markdown: str) -> None:
    """Remember the markdown behind a rendered table image."""
    _cache.put(message_disc_id, markdown)


def get_cached_markdown_table(message_disc_id: int) -> Lookup[str]:
    """Return the markdown of a table message: found, expired or missing."""
    return _cache.lookup(message_disc_id)


def invalidate_markdown_table(message_disc_id: int) -> int:
    """Forget one message's markdown (the message was deleted)."""
    return _cache.invalidate(message_disc_id)


LAYER = Layer(
    name=NAME,
    description="Markdown behind rendered table images (message id -> markdown).",
    policy=EmergencyPolicy.CLEAR,
    invalidatable=False,
    key=MESSAGE_KEY,
    not_fed=NotFed.TURN_WRITTEN,
    build=_build,
    settings=(CAP_SETTING, TTL_SETTING),
)

__all__ = [
    "LAYER",
    "Lookup",
    "LookupStatus",
    "cache_markdown_table",
    "get_cached_markdown_table",
    "invalidate_markdown_table",
    "markdown_button_timeout_seconds",
    "markdown_table_cache",
]
