"""Base class of every model that feeds a cache layer.

It remembers the values a row was loaded with, so an invalidation rule can
name the cache keys of both the old and the new row when a key field changes
(a persona moved to another server, a whitelist row moved to another channel),
and it gives the model a QuerySet whose bulk write paths (update, delete,
bulk_create, bulk_update), which Django sends no per-row signal for, still
invalidate. The invalidation machinery lives in `caches.invalidation`, which
installs itself here at start (`install_change_tracker`, from the caches app's
`ready()`): the models import nothing from the caches, so the cache layers can
import the repositories without a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol

from django.db import models, router, transaction


class ChangeTracker(Protocol):
    """The bulk write paths of `caches.invalidation.tracking`."""

    def tracked_update(self, queryset: Any, kwargs: dict[str, Any], /) -> int: ...

    def tracked_bulk_update(
        self,
        queryset: Any,
        objs: Iterable[Any],
        fields: list[str],
        run: Callable[[list[Any]], int],
        /,
    ) -> int: ...

    def tracked_bulk_create(
        self,
        queryset: Any,
        objs: Iterable[Any],
        options: dict[str, Any],
        run: Callable[[list[Any]], list[Any]],
        /,
    ) -> list[Any]: ...


_tracker: ChangeTracker | None = None


def install_change_tracker(tracker: ChangeTracker) -> None:
    """Route the bulk write paths through `tracker` (the caches app, at start)."""
    global _tracker
    _tracker = tracker


def _tracking() -> ChangeTracker:
    if _tracker is None:
        raise RuntimeError(
            "a cache-feeding write ran before the caches app installed its "
            "change tracker (caches.apps.CachesConfig.ready)"
        )
    return _tracker


class CacheFeedingQuerySet(models.QuerySet):
    """QuerySet whose signal-less bulk writes still invalidate (see caches.invalidation).

    delete() needs no override: the invalidation receivers connected to every
    cache-feeding model stop Django from fast-deleting, so each deleted row
    (cascades included) sends pre_delete/post_delete.
    """

    def update(self, **kwargs: Any) -> int:
        """Update the rows, invalidating the old and new keys of each after commit."""
        return _tracking().tracked_update(self, kwargs)

    def bulk_update(
        self, objs: Iterable[Any], fields: Iterable[str], batch_size: int | None = None
    ) -> int:
        """Update `fields` of `objs`, invalidating their old and new keys after commit."""
        fields = list(fields)

        def run(rows: list[Any]) -> int:
            return super(CacheFeedingQuerySet, self).bulk_update(
                rows, fields, batch_size=batch_size
            )

        return _tracking().tracked_bulk_update(self, objs, fields, run)

    def bulk_create(
        self,
        objs: Iterable[Any],
        batch_size: int | None = None,
        ignore_conflicts: bool = False,
        update_conflicts: bool = False,
        update_fields: Collection[str] | None = None,
        unique_fields: Collection[str] | None = None,
    ) -> list[Any]:
        """Insert `objs`, invalidating their keys after commit."""

        def run(rows: list[Any]) -> list[Any]:
            return super(CacheFeedingQuerySet, self).bulk_create(
                rows,
                batch_size=batch_size,
                ignore_conflicts=ignore_conflicts,
                update_conflicts=update_conflicts,
                update_fields=update_fields,
                unique_fields=unique_fields,
            )

        options = {"update_conflicts": update_conflicts, "update_fields": update_fields}
        return _tracking().tracked_bulk_create(self, objs, options, run)


class CacheFeedingModel(models.Model):
    """A model whose writes invalidate cache entries after commit."""

    objects = CacheFeedingQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save in a transaction, so the row and its outbox events commit together."""
        using = kwargs.get("using") or router.db_for_write(type(self), instance=self)
        with transaction.atomic(using=using, savepoint=False):
            super().save(*args, **kwargs)

    @classmethod
    def from_db(cls, db: str | None, field_names: Any, values: Any) -> Any:
        instance = super().from_db(db, field_names, values)
        instance._loaded_values = dict(zip(field_names, values, strict=True))
        return instance

    def loaded_value(self, attname: str) -> Any:
        """Return the value `attname` had when the row was loaded (or now, if new)."""
        loaded = getattr(self, "_loaded_values", None)
        if loaded is None or attname not in loaded:
            return getattr(self, attname)
        return loaded[attname]

    def mark_saved(self) -> None:
        """Make the current values the baseline for the next change."""
        self._loaded_values = {
            f.attname: getattr(self, f.attname) for f in self._meta.concrete_fields
        }
