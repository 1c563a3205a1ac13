"""Celery tasks of the caches app (kept thin: they call services)."""

from __future__ import annotations

from celery import shared_task

from caches.catalogs.service import refresh_and_store


@shared_task(name="caches.refresh_openrouter_catalogs", ignore_result=True)
def refresh_openrouter_catalogs(force: bool = False) -> dict[str, str]:
    """Refresh the stale OpenRouter catalogs, store and announce the new snapshots."""
    return refresh_and_store(force=force)
