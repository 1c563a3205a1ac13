"""The Celery app, configured from Django settings (namespace CELERY).

Celery runs no Django system checks, so the worker and beat check the
settings themselves at start and refuse to run with an invalid one.
"""

import os
import sys
from typing import Any

from celery import Celery
from celery.signals import beat_init, worker_init

from tomori.startup import exit_on_settings_error

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings")

app = Celery("tomori")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["caches", "metrics", "tomori"])


@worker_init.connect
@beat_init.connect
def _refuse_invalid_settings(**_: Any) -> None:
    import django

    django.setup()
    from django.core.exceptions import ImproperlyConfigured

    from tomori.checks import raise_on_invalid_settings

    try:
        raise_on_invalid_settings()
    except ImproperlyConfigured as exc:
        # Celery logs and swallows exceptions from signal receivers: exit instead.
        print(exc, file=sys.stderr)
        raise SystemExit(1) from exc


@app.on_configure.connect
def _exit_on_settings_error(**_: Any) -> None:
    # Sent when the configuration is first read: a settings error is one line.
    exit_on_settings_error()
