"""Markdown table render cache (spec 13): message id -> the original markdown.

Read by history builders (so the model sees the table's text, not an image)
and by the message's "Show Markdown" button. The button's timeout must not
exceed this cache's ttl (start-up check in `tomori.domain.knobs`), and an entry gone
anyway answers EXPIRED, which the button shows as the expired notice.
"""

from __future__ import annotations

from caches.layers._message_keyed import Lookup, LookupStatus, MessageKeyedLayer
from tomori.domain.knobs import knobs

NAME = "markdown_table"

_layer: MessageKeyedLayer[str] = MessageKeyedLayer(
    NAME,
    cap_setting="MARKDOWN_TABLE_CACHE_MAX_ENTRIES",
    ttl_setting="MARKDOWN_TABLE_CACHE_TTL_MINUTES",
    description="Markdown behind rendered table images (message id -> markdown).",
)

#: Return this process's markdown table cache (tests, metrics).
markdown_table_cache = _layer.built
#: Remember the markdown behind a rendered table image.
cache_markdown_table = _layer.put
#: Return the markdown of a table message: found, expired or missing.
get_cached_markdown_table = _layer.lookup
#: Forget one message's markdown (the message was deleted).
invalidate_markdown_table = _layer.invalidate


def markdown_button_timeout_seconds() -> float:
    """Return the "Show Markdown" button's timeout (never beyond the cache ttl)."""
    return knobs().MARKDOWN_TABLE_BUTTON_TIMEOUT_MS / 1000.0


LAYER = _layer.layer

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
