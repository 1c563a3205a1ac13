"""Signal receivers that record the invalidations of every per-row write, and their wiring.

`connect_signals()` connects them per cache-feeding model (never to every
model, so Django keeps fast-deleting the tables no cache reads). Deletes and
cascades: pre_delete notes the row and the rows a SET_NULL is about to
rewrite; post_delete records them. Saves: pre_save reads the stored row (the
old keys), post_save records the change.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.apps import apps
from django.db import connections, models
from django.db.models.signals import (
    m2m_changed,
    post_delete,
    post_save,
    pre_delete,
    pre_save,
)

from caches.invalidation.collector import pending_for
from caches.invalidation.tracking import (
    fetch_rows,
    instance_row,
    loaded_row,
    model_rules,
    read_columns,
    record_change,
    record_changes,
    touched_columns,
    touches_rules,
)
from caches.rules import labels, row_events, unique

_OLD = "_tomori_invalidation_old"
_DELETING = "_tomori_invalidation_deleting"
_CLEARING = "_tomori_invalidation_clearing"
_SKIP = object()
_FIELD_UPDATES = (models.CASCADE, models.PROTECT, models.RESTRICT, models.DO_NOTHING)


def _columns(model: type[models.Model]) -> tuple[str, ...]:
    return read_columns(model)


def _pre_save(
    sender: Any, instance: Any, using: str, update_fields: Any, **_: Any
) -> None:
    touched = touched_columns(sender, update_fields)
    if not touches_rules(sender, touched):
        instance.__dict__[_OLD] = _SKIP
        return
    old = None
    if instance.pk is not None:
        rows = fetch_rows(sender, using, [instance.pk], _columns(sender), lock=True)
        old = rows.get(instance.pk)
    instance.__dict__[_OLD] = old


def _post_save(
    sender: Any, instance: Any, created: bool, using: str, update_fields: Any, **_: Any
) -> None:
    old = instance.__dict__.pop(_OLD, None)
    if old is _SKIP:
        return
    new = _saved_row(sender, instance, old, update_fields, using)
    record_change(sender, None if created else old, new, using=using)
    if hasattr(instance, "mark_saved"):
        instance.mark_saved()


def _saved_row(
    model: Any, instance: Any, old: dict | None, update_fields: Any, using: str
) -> dict[str, Any]:
    columns = _columns(model)
    written = touched_columns(model, update_fields)
    loaded = instance.__dict__  # getattr would load deferred fields
    if any(hasattr(loaded.get(c), "resolve_expression") for c in columns):
        # An F() expression was saved: only the database knows the value now.
        return fetch_rows(model, using, [instance.pk], columns)[instance.pk]
    if old is None or written is None:
        return instance_row(instance, columns)
    # Columns a save(update_fields=...) left alone keep their stored values.
    kept = [c for c in columns if c in written]
    return {**old, **instance_row(instance, kept)}


def _pre_delete(
    sender: Any, instance: Any, using: str, origin: Any = None, **_: Any
) -> None:
    columns = _columns(sender)
    row: dict[str, Any] | None = None
    # Rows a delete collector (cascade, QuerySet.delete) just loaded are fresh;
    # an instance deleted by itself may have been loaded long before the row
    # moved (e.g. an update() to another server), so ask the database.
    collected = origin is not None and origin is not instance
    if collected and hasattr(instance, "_loaded_values"):
        row = loaded_row(instance, columns)
    else:
        row = fetch_rows(sender, using, [instance.pk], columns).get(instance.pk)
        if row is None and hasattr(instance, "_loaded_values"):
            row = loaded_row(instance, columns)
    instance.__dict__[_DELETING] = (row, _rows_to_be_nulled(sender, instance, using))


def _rows_to_be_nulled(model: Any, instance: Any, using: str) -> list[tuple[Any, dict]]:
    # SET_NULL (and SET_DEFAULT, SET(...)) rewrite rows without a signal.
    found = []
    for rel in model._meta.related_objects:
        related = rel.related_model
        if rel.many_to_many or rel.on_delete in (None, *_FIELD_UPDATES):
            continue
        if not model_rules(related):
            continue
        qs = related._base_manager.using(using).filter(**{rel.field.name: instance})
        if connections[using].in_atomic_block:
            qs = qs.select_for_update(of=("self",))
        found += [(related, row) for row in qs.values(*_columns(related))]
    return found


def _post_delete(
    sender: Any, instance: Any, using: str, origin: Any = None, **_: Any
) -> None:
    state = instance.__dict__.pop(_DELETING, None)
    if state is None:
        return
    row, nulled = state
    # One delete() and all its cascades (same origin) make one batch.
    scope = origin if origin is not None else instance
    if row is not None:
        record_change(sender, row, None, using=using, scope=scope)
    for model in {model for model, _ in nulled}:
        before = {r[model._meta.pk.attname]: r for m, r in nulled if m is model}
        after = fetch_rows(model, using, before, _columns(model))
        changes = [(old, after.get(pk)) for pk, old in before.items()]
        record_changes(model, changes, using=using, scope=scope)


def _m2m_changed(
    sender: Any,
    instance: Any,
    action: str,
    reverse: bool,
    pk_set: Any,
    using: str,
    **_: Any,
) -> None:
    owner, name = _m2m_owners()[sender]
    if action == "pre_clear" and reverse:
        related = owner._base_manager.using(using).filter(**{name: instance.pk})
        instance.__dict__[_CLEARING] = list(related.values_list("pk", flat=True))
        return
    if action not in {"post_add", "post_remove", "post_clear"}:
        return
    if not reverse:
        pks = [instance.pk]  # read back: the instance's key columns may be stale
    else:
        pks = instance.__dict__.pop(_CLEARING, []) if pk_set is None else pk_set
    rows = list(fetch_rows(owner, using, pks, _columns(owner)).values())
    _record_m2m(owner, name, rows, using)


def _record_m2m(owner: Any, name: str, rows: list[dict], using: str) -> None:
    pending = pending_for(using)
    pk = owner._meta.pk.attname
    events = [
        event
        for rule in model_rules(owner)
        if name in rule.m2m
        for row in rows
        for event in row_events(rule, row, pending.lookup, pk=pk)
    ]
    if events:
        pending.add(unique(events))


def cache_feeding_models() -> list[type[models.Model]]:
    """Return every model that has an invalidation rule."""
    return [apps.get_model(label) for label in labels()]


@cache
def _m2m_owners() -> dict[Any, tuple[type[models.Model], str]]:
    owners = {}
    for model in cache_feeding_models():
        for rule in model_rules(model):
            for name in rule.m2m:
                field = model._meta.get_field(name)
                assert isinstance(field, models.ManyToManyField), (model, name)
                owners[field.remote_field.through] = (model, name)
    return owners


def connect_signals() -> None:
    """Connect every invalidation receiver (idempotent: each has a dispatch_uid)."""
    receivers = (
        (pre_save, _pre_save),
        (post_save, _post_save),
        (pre_delete, _pre_delete),
        (post_delete, _post_delete),
    )
    for model in cache_feeding_models():
        label = model._meta.label_lower
        for signal, receiver in receivers:
            uid = f"caches.invalidation.{receiver.__name__[1:]}.{label}"
            signal.connect(receiver, sender=model, dispatch_uid=uid)
    for through in _m2m_owners():
        uid = f"caches.invalidation.m2m_changed.{through._meta.label_lower}"
        m2m_changed.connect(_m2m_changed, sender=through, dispatch_uid=uid)
