"""Resolve the ids a cache key needs (a server's Discord id) from a row's foreign keys."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.apps import apps

if TYPE_CHECKING:
    from caches.rules import Rule

#: Primary keys one prefetch query names at most (SQLite allows 32,766
#: parameters; PostgreSQL's IN list stays cheap at this size).
PREFETCH_CHUNK = 5_000


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

    def prefetch(
        self, rules: Sequence[Rule], rows: Iterable[Mapping[str, Any] | None]
    ) -> None:
        """Look up at once what `rules` read through other tables for `rows`.

        A queryset update of 10,000 personas of 10,000 servers asks one
        query per 5,000 servers instead of one per server; `value` then
        answers from the memo (None for a row that is gone, as it would).
        """
        wanted: dict[tuple[str, str], set[Any]] = {}
        vias = [via for rule in rules for via in rule.vias]
        if not vias:
            return
        for row in rows:
            if row is None:
                continue
            for via in vias:
                pk = row.get(via.column)
                if pk is not None and (via.model, pk, via.attname) not in self._memo:
                    wanted.setdefault((via.model, via.attname), set()).add(pk)
        for (model, attname), pks in wanted.items():
            manager = apps.get_model(model)._base_manager.using(self.using)
            ordered = sorted(pks)
            for start in range(0, len(ordered), PREFETCH_CHUNK):
                chunk = ordered[start : start + PREFETCH_CHUNK]
                found = dict(manager.filter(pk__in=chunk).values_list("pk", attname))
                for pk in chunk:
                    self._memo[(model, pk, attname)] = found.get(pk)

    def clear(self) -> None:
        """Forget every remembered answer (a looked-up row changed)."""
        self._memo.clear()
