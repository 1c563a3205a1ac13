"""Stored OpenRouter catalog snapshots: one row per catalog."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tomori.domain.models import CatalogSnapshot


def save_catalog_snapshot(
    name: str, models: list[Any], *, fetched_at: datetime
) -> None:
    """Store `models` (the raw `data` list) as catalog `name`'s snapshot."""
    CatalogSnapshot.objects.update_or_create(
        catalog=name,
        defaults={
            "payload": models,
            "model_count": len(models),
            "fetched_at": fetched_at,
        },
    )


def load_catalog_snapshots(
    names: list[str] | None = None,
) -> dict[str, tuple[list[Any], datetime]]:
    """Return {catalog: (raw models, fetched_at)} for the stored snapshots."""
    rows = CatalogSnapshot.objects.all()
    if names is not None:
        rows = rows.filter(catalog__in=names)
    return {row.catalog: (row.payload, row.fetched_at) for row in rows}


def catalog_snapshot_times() -> dict[str, datetime]:
    """Return when each stored snapshot was fetched, without loading payloads."""
    return dict(CatalogSnapshot.objects.values_list("catalog", "fetched_at"))
