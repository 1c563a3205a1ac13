"""Tomori: a Discord bot's cache layers, run and steered from the Django admin.

The Celery app (`tomori.celery`, found by `celery -A tomori`) is imported on
first use of `tomori.celery_app`, not with the package: a process that runs
no Celery (the bot worker, the admin) does not hold Celery, kombu and their
dependencies (about 8 MB). Nothing here sends tasks; beat schedules them.
"""

from typing import Any

__all__ = ["celery_app"]


def __getattr__(name: str) -> Any:
    if name == "celery_app":
        from tomori.celery import app

        return app
    raise AttributeError(f"module 'tomori' has no attribute {name!r}")
