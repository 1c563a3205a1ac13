"""Shared helpers of the repositories' write services."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import models


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
