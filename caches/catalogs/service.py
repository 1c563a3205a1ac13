"""Django side of the catalogs: settings, snapshot storage, Celery task, bus (stub).

The only module of `caches.catalogs` allowed to import Django. The lead wires
here: storing each successful fetch as a snapshot row (`on_refreshed`),
loading the newest snapshots at worker start (`CatalogRefresher.load_snapshot`),
the Celery refresh task and the bus announcement.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from caches.catalogs.catalog_set import CatalogSet
from caches.catalogs.refresher import OnRefreshed


def build_catalog_set(
    *, on_refreshed: OnRefreshed | None = None, **overrides: Any
) -> CatalogSet:
    """Return a CatalogSet configured from the OPENROUTER_* settings (ms become seconds)."""
    options: dict[str, Any] = {
        "base_url": _setting("OPENROUTER_BASE_URL"),
        "api_key": _setting("OPENROUTER_API_KEY") or None,
        "ttl": _setting("OPENROUTER_CATALOG_TTL_MS") / 1000,
        "min_interval": _setting("OPENROUTER_CATALOG_REFRESH_MIN_INTERVAL_MS") / 1000,
        "timeout": _setting("OPENROUTER_HTTP_TIMEOUT_SECONDS"),
        "on_refreshed": on_refreshed,
    }
    return CatalogSet(**(options | overrides))


def _setting(name: str) -> Any:
    # The knobs are injected into settings by read_knobs(), which mypy cannot see.
    return getattr(settings, name)
