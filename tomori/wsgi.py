"""WSGI entry point for the admin web process (gunicorn tomori.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings")
application = get_wsgi_application()
