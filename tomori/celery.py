"""The Celery app, configured from Django settings (namespace CELERY).

Celery runs no Django system checks, so the worker and beat check the
settings themselves at start and refuse to run with an invalid one.

Django is set up by Celery's Django fixup while the loader initialises,
before Celery redirects stdout/stderr into its logging. It must not be set
up again after that: `django.setup()` re-applies LOGGING, whose console
handler would then write to the redirected stderr, and Celery's recursion
guard drops every record (beat went silent, even "Sending due task").
Errors are printed to the real stderr for the same reason.
"""

import logging
import os
import sys
from typing import Any

from celery import Celery
from celery.signals import beat_init, worker_init

from caches.process_identity import set_kind
from tomori.startup import exit_on_settings_error

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings")

# beat's own logger: its lines show under `beat -l info` beside "Sending due task".
_beat_logger = logging.getLogger("celery.beat")

app = Celery("tomori")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["tomori"])


def _setup_django_once() -> None:
    from django.apps import apps

    if not apps.ready:
        import django

        django.setup()


@worker_init.connect
def _name_the_worker(**_: Any) -> None:
    # The origin of what this process (and its prefork children) writes.
    set_kind("celery-worker")


@beat_init.connect
def _name_beat(**_: Any) -> None:
    set_kind("celery-beat")


@worker_init.connect
@beat_init.connect
def _refuse_invalid_settings(**_: Any) -> None:
    from django.core.exceptions import ImproperlyConfigured

    try:
        _setup_django_once()
        from tomori.checks import raise_on_invalid_settings

        raise_on_invalid_settings()
    except ImproperlyConfigured as exc:
        # Celery logs and swallows exceptions from signal receivers: exit instead.
        print(exc, file=sys.__stderr__, flush=True)
        raise SystemExit(1) from exc


@beat_init.connect
def _send_at_start(**_: Any) -> None:
    """Send the TOMORI_BEAT_AT_START entries once, after their delay (then on schedule)."""
    from django.conf import settings

    schedule = app.conf.beat_schedule or {}
    for name, delay in getattr(settings, "TOMORI_BEAT_AT_START", {}).items():
        entry = schedule.get(name)
        if entry is None:
            continue
        app.send_task(
            entry["task"],
            args=entry.get("args", ()),
            kwargs=entry.get("kwargs", {}),
            countdown=delay,
            **entry.get("options", {}),
        )
        _beat_logger.info(
            "Scheduler: %s (%s) sent to run once %g s after start, then every %s",
            name,
            entry["task"],
            delay,
            _every(entry["schedule"]),
        )


def _every(schedule: Any) -> str:
    return f"{schedule:g} s" if isinstance(schedule, int | float) else str(schedule)


@app.on_configure.connect
def _exit_on_settings_error(**_: Any) -> None:
    # Sent when the configuration is first read: a settings error is one line.
    exit_on_settings_error()
