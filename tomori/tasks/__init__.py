"""Celery tasks (kept thin: they call services); found by `autodiscover_tasks`."""

from tomori.tasks.catalogs import refresh_openrouter_catalogs
from tomori.tasks.memory import (
    PURGE_SHORT_TERM_MEMORY_SCHEDULE,
    purge_short_term_memory,
)

__all__ = [
    "PURGE_SHORT_TERM_MEMORY_SCHEDULE",
    "purge_short_term_memory",
    "refresh_openrouter_catalogs",
]
