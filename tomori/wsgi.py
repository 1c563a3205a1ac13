"""WSGI entry point for the admin web process (gunicorn tomori.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

from caches.process_identity import set_kind
from tomori.startup import exit_on_settings_error

# 4 is gunicorn's "App failed to load": its arbiter stops instead of
# respawning a worker that can never boot (any other code loops).
GUNICORN_APP_LOAD_ERROR = 4

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings")
set_kind("admin-web")  # the origin of what this process writes
exit_on_settings_error(code=GUNICORN_APP_LOAD_ERROR)
application = get_wsgi_application()

# gunicorn runs no system checks: refuse to serve with an invalid setting.
from tomori.checks import raise_on_invalid_settings  # noqa: E402

raise_on_invalid_settings()
