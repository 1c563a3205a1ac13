"""Turn row changes into recorded events, including the writes Django sends no signal for.

`QuerySet.update`, `bulk_update` and `bulk_create` of cache-feeding models come
here from `CacheFeedingQuerySet`: an update reads the affected rows' relevant
columns (locked) before, writes only those rows, and reads them again after,
so both the old and the new keys are invalidated.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import DEFAULT_DB_ALIAS, connections, models, transaction

from caches.invalidation.collector import pending_for
from caches.rules import LOOKUP_MODELS, Event, Rule, change_events, rules_for, unique

Row = dict[str, Any]

_suspended: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "tomori_invalidation_suspended", default=False
)


def model_rules(model: type[models.Model]) -> tuple[Rule, ...]:
    """Return the invalidation rules of `model` (empty when it feeds no cache)."""
    return rules_for(model._meta.label)


def all_columns(model: type[models.Model]) -> tuple[str, ...]:
    """Return the attribute names of `model`'s concrete columns."""
    return tuple(f.attname for f in model._meta.concrete_fields)


_read_columns: dict[str, tuple[str, ...]] = {}


def read_columns(model: type[models.Model]) -> tuple[str, ...]:
    """Return the columns a change of `model` must be read with (pk first)."""
    label = model._meta.label
    if label not in _read_columns:
        columns = all_columns(model)
        rules = model_rules(model)
        wanted = set().union(*(rule.relevant(columns) for rule in rules))
        pk = model._meta.pk.attname
        _read_columns[label] = (pk, *(c for c in columns if c in wanted and c != pk))
    return _read_columns[label]


def touched_columns(
    model: type[models.Model], names: Iterable[str] | None
) -> frozenset[str] | None:
    """Return the attnames behind field `names` (None stays None: every column)."""
    if names is None:
        return None
    attnames = set()
    for name in names:
        field = model._meta.get_field(name)
        if not isinstance(field, models.Field):
            raise FieldDoesNotExist(f"{model.__name__} has no column {name!r}")
        attnames.add(field.attname)
    return frozenset(attnames)


def touches_rules(model: type[models.Model], columns: frozenset[str] | None) -> bool:
    """Return whether writing `columns` (None: all) can fire one of `model`'s rules."""
    rules = model_rules(model)
    if columns is None:
        return bool(rules)
    every = all_columns(model)
    return any(rule.relevant(every) & columns for rule in rules)


def fetch_rows(
    model: type[models.Model],
    using: str,
    pks: Iterable[Any],
    columns: Sequence[str],
    *,
    lock: bool = False,
) -> dict[Any, Row]:
    """Return the current rows `pks` of `model`, keyed by pk (locked if asked)."""
    pks = list(pks)
    if not pks:
        return {}
    qs = model._base_manager.using(using).filter(pk__in=pks)
    if lock and connections[using].in_atomic_block:
        qs = qs.select_for_update(of=("self",))
    pk = model._meta.pk.attname
    return {row[pk]: row for row in qs.values(*columns)}


def instance_row(instance: models.Model, columns: Sequence[str]) -> Row:
    """Return `instance`'s current values of `columns`, as the database stores them."""
    fields = {f.attname: f for f in instance._meta.concrete_fields}
    return {c: fields[c].to_python(getattr(instance, c)) for c in columns}


def loaded_row(instance: models.Model, columns: Sequence[str]) -> Row:
    """Return the values `instance` was loaded with (current ones if never loaded)."""
    loaded = getattr(instance, "loaded_value", None)
    if loaded is None:
        return {c: getattr(instance, c) for c in columns}
    return {c: loaded(c) for c in columns}


def record_change(
    model: type[models.Model],
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
    *,
    using: str = DEFAULT_DB_ALIAS,
    scope: object | None = None,
) -> list[Event]:
    """Record the events of one row of `model` going from `old` to `new`.

    A repository whose raw SQL changed rows of a cache-feeding model can
    declare the change in model terms here (rows as {attname: value}).
    """
    return record_changes(model, [(old, new)], using=using, scope=scope)


def record_changes(
    model: type[models.Model],
    changes: Iterable[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]],
    *,
    using: str,
    scope: object | None = None,
) -> list[Event]:
    """Record the events of rows of `model` changing (None: row absent)."""
    rules = model_rules(model)
    pending = pending_for(using, scope=scope)
    columns, pk = all_columns(model), model._meta.pk.attname
    events: list[Event] = []
    changes = list(changes)
    if len(changes) > 1:  # one query per looked-up table, not one per row
        pending.lookup.prefetch(rules, (row for pair in changes for row in pair))
    for old, new in changes:
        events += change_events(rules, old, new, pending.lookup, columns=columns, pk=pk)
    if model._meta.label in LOOKUP_MODELS:
        pending.lookup.clear()
    events = unique(events)
    if events:
        pending.add(events)
    return events


def _pair(before: Mapping[Any, Row], after: Mapping[Any, Row]) -> list[tuple[Any, Any]]:
    return [(before.get(pk), after.get(pk)) for pk in {*before, *after}]


@contextmanager
def suspended() -> Iterator[None]:
    """Stop tracking nested updates (the caller tracks the whole write itself)."""
    token = _suspended.set(True)
    try:
        yield
    finally:
        _suspended.reset(token)


def tracked_update(qs: models.QuerySet, kwargs: dict[str, Any]) -> int:
    """Run `qs.update(**kwargs)`, recording the events of every row it changed."""
    model = qs.model
    plain = models.QuerySet.update
    try:
        columns = touched_columns(model, kwargs)
    except FieldDoesNotExist:
        return plain(qs, **kwargs)  # Django raises its own error for the bad name
    if _suspended.get() or qs.query.is_sliced or not touches_rules(model, columns):
        return plain(qs, **kwargs)
    read = read_columns(model)
    with transaction.atomic(using=qs.db, savepoint=False):
        locked = qs.select_for_update(of=("self",)) if _lockable(qs) else qs
        pk = model._meta.pk.attname
        before = {row[pk]: row for row in locked.values(*read)}
        if not before:
            return 0
        # Only the rows read (and locked) above, so none escapes the record.
        count = plain(qs.filter(pk__in=list(before)), **kwargs)
        after = fetch_rows(model, qs.db, before, read)
        record_changes(model, _pair(before, after), using=qs.db)
    return count


def _lockable(qs: models.QuerySet) -> bool:
    # PostgreSQL refuses FOR UPDATE with DISTINCT or GROUP BY.
    return not qs.query.distinct and qs.query.group_by is None


def tracked_bulk_update(
    qs: models.QuerySet,
    objs: Iterable[models.Model],
    fields: Sequence[str],
    run: Callable[[list[models.Model]], int],
) -> int:
    """Run a bulk_update through `run`, recording the events of the rows it changed."""
    model, objs = qs.model, list(objs)
    if not touches_rules(model, touched_columns(model, fields)):
        return run(objs)
    read = read_columns(model)
    pks = [obj.pk for obj in objs if obj.pk is not None]
    with transaction.atomic(using=qs.db, savepoint=False):
        before = fetch_rows(model, qs.db, pks, read, lock=True)
        with suspended():
            count = run(objs)
        after = fetch_rows(model, qs.db, pks, read)
        record_changes(model, _pair(before, after), using=qs.db)
    return count


def tracked_bulk_create(
    qs: models.QuerySet,
    objs: Iterable[models.Model],
    options: dict[str, Any],
    run: Callable[[list[models.Model]], list[models.Model]],
) -> list[models.Model]:
    """Run a bulk_create through `run`, recording the events of the rows it wrote."""
    model, objs = qs.model, list(objs)
    rules = model_rules(model)
    if not rules:
        return run(objs)
    read = read_columns(model)
    with transaction.atomic(using=qs.db, savepoint=False):
        created = run(objs)
        changes = [(None, instance_row(obj, read)) for obj in created]
        record_changes(model, changes, using=qs.db)
        _record_upsert_keys(model, rules, options, using=qs.db)
    for obj in created:
        if hasattr(obj, "mark_saved"):
            obj.mark_saved()
    return created


def _record_upsert_keys(
    model: type[models.Model],
    rules: Sequence[Rule],
    options: dict[str, Any],
    *,
    using: str,
) -> None:
    # An upsert may rewrite key columns of rows whose old values were never
    # read: drop those caches whole rather than miss the old keys.
    if not options.get("update_conflicts"):
        return
    updated = touched_columns(model, options.get("update_fields") or ())
    events = [
        Event(name, "all")
        for rule in rules
        if updated and set(rule.reads) & updated
        for name in rule.caches
    ]
    if events:
        pending_for(using).add(unique(events))
