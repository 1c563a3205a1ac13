"""Django's SQLite backend, creating `var/` on the first connection instead of at settings load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.backends.sqlite3 import base


class DatabaseWrapper(base.DatabaseWrapper):
    """SQLite creates its file but not its folder: make `var/` when first connecting."""

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        name = str(conn_params.get("database", ""))
        if name and name != ":memory:" and not name.startswith("file:"):
            folder = Path(name).resolve().parent
            if folder.is_relative_to(Path(settings.VAR_DIR).resolve()):
                folder.mkdir(parents=True, exist_ok=True)
        return super().get_new_connection(conn_params)
