"""Resolve the ids a cache key needs (a server's Discord id) from a row's foreign keys."""

from __future__ import annotations

from typing import Any

from django.apps import apps


class DbLookup:
    """Read ids from the database, remembering each answer for one batch of events."""

    def __init__(self, using: str) -> None:
        self.using = using
        self._memo: dict[tuple[str, Any, str], Any] = {}

    def server_disc_id(self, server_id: int) -> int | None:
        """Return the Discord id of server `server_id` (None if the row is gone)."""
        return self._value("tomori.Server", server_id, "server_disc_id")

    def user_disc_id(self, user_id: int) -> int | None:
        """Return the Discord id of user `user_id` (None if the row is gone)."""
        return self._value("tomori.User", user_id, "user_disc_id")

    def preset_server_id(self, preset_id: int) -> int | None:
        """Return the server id of ST preset `preset_id` (None if the row is gone)."""
        return self._value("tomori.StPreset", preset_id, "server_id")

    def clear(self) -> None:
        """Forget every remembered answer (a looked-up row changed)."""
        self._memo.clear()

    def _value(self, label: str, pk: Any, attname: str) -> Any:
        if pk is None:
            return None
        key = (label, pk, attname)
        if key not in self._memo:
            model = apps.get_model(label)
            rows = model._base_manager.using(self.using).filter(pk=pk)
            self._memo[key] = rows.values_list(attname, flat=True).first()
        return self._memo[key]
