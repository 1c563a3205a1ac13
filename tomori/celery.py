"""The Celery app, configured from Django settings (namespace CELERY)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings")

app = Celery("tomori")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["caches", "metrics", "tomori"])
