"""Shared helpers of the repositories: write services, reads of many keys at once."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar

from django.db import models

K = TypeVar("K")
R = TypeVar("R")
T = TypeVar("T")


def check_fields(allowed: Iterable[str], fields: Mapping[str, Any]) -> None:
    """Raise ValueError naming any field a service does not let callers set."""
    unknown = set(fields) - set(allowed)
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(sorted(unknown))}")


def save_changes(
    instance: models.Model, allowed: Iterable[str], fields: Mapping[str, Any]
) -> None:
    """Set `fields` on a loaded row and save only them (plus auto_now stamps)."""
    check_fields(allowed, fields)
    for name, value in fields.items():
        setattr(instance, name, value)
    # update_fields lets the invalidation rules skip saves that touch no key field.
    stamps = [
        f.name
        for f in instance._meta.concrete_fields
        if getattr(f, "auto_now", False) and f.name not in fields
    ]
    instance.save(update_fields=[*fields, *stamps])


def build(
    model: type[models.Model],
    allowed: Iterable[str],
    fields: Mapping[str, Any],
    **keys: Any,
) -> Any:
    """Return an unsaved row of `model` from its key fields and the caller's fields."""
    check_fields(allowed, fields)
    return model(**keys, **fields)


def grouped(
    keys: Collection[K],
    rows: Iterable[R],
    key_of: Callable[[R], K],
    record: Callable[[R], T],
) -> dict[K, tuple[T, ...]]:
    """Return {key: the records of its rows, in row order} for every key asked.

    A read of many keys at once (a warm-up): a key no row has gets ().
    """
    found: dict[K, list[T]] = {key: [] for key in keys}
    for row in rows:
        found[key_of(row)].append(record(row))
    return {key: tuple(records) for key, records in found.items()}
