"""WSGI entry point for the admin web process (gunicorn tomori.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings")
application = get_wsgi_application()

# gunicorn runs no system checks: refuse to serve with an invalid setting.
from tomori.checks import raise_on_invalid_settings  # noqa: E402

raise_on_invalid_settings()
