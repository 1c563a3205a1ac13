"""Celery tasks of the Tomori domain: the short-term memory janitor."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from tomori.domain.knobs import knobs
from tomori.domain.repositories.memory import purge_memory_records

logger = logging.getLogger(__name__)

#: Beat entry for `CELERY_BEAT_SCHEDULE` (daily; the lead wires it in settings).
PURGE_SHORT_TERM_MEMORY_SCHEDULE = {
    "task": "tomori.tasks.purge_short_term_memory",
    "schedule": timedelta(days=1),
}


@shared_task(name="tomori.tasks.purge_short_term_memory", ignore_result=True)
def purge_short_term_memory() -> int:
    """Delete durable short-term memory rows older than STM_JANITOR_RETENTION_DAYS."""
    days = knobs().STM_JANITOR_RETENTION_DAYS
    deleted = purge_memory_records(older_than=timezone.now() - timedelta(days=days))
    logger.info("purged %d short-term memory rows older than %d days", deleted, days)
    return deleted
