"""Resolve the ids a cache key needs (a server's Discord id) from a row's foreign keys."""

from __future__ import annotations

from typing import Any

from django.apps import apps


class DbLookup:
    """Read ids from the database, remembering each answer for one batch of events.

    It answers the layers' `Via` key parts (`caches.layers._feeds`).
    """

    def __init__(self, using: str) -> None:
        self.using = using
        self._memo: dict[tuple[str, Any, str], Any] = {}

    def value(self, model: str, pk: Any, attname: str) -> Any:
        """Return column `attname` of row `pk` of `model` (None if the row is gone)."""
        if pk is None:
            return None
        key = (model, pk, attname)
        if key not in self._memo:
            rows = apps.get_model(model)._base_manager.using(self.using).filter(pk=pk)
            self._memo[key] = rows.values_list(attname, flat=True).first()
        return self._memo[key]

    def clear(self) -> None:
        """Forget every remembered answer (a looked-up row changed)."""
        self._memo.clear()
