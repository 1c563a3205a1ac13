"""Start-up guard: a settings error prints one line naming what to set, never a traceback."""

from __future__ import annotations

import sys

from django.core.exceptions import ImproperlyConfigured


def exit_on_settings_error(*, code: int = 2) -> None:
    """Import the settings now; on ImproperlyConfigured print `error: ...` and exit `code`.

    Without this, manage.py swallows the error at settings import and fails
    later with `KeyError: '<command>'`, and Celery prints a 40-line traceback.
    """
    from django.conf import settings

    try:
        settings.INSTALLED_APPS  # noqa: B018 (the access imports the settings module)
    except ImproperlyConfigured as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(code) from None
