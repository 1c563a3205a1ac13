"""Settings for the beat start test: a catalog-like entry, due in an hour, also sent at start."""

import os

from tomori.settings_test import *  # noqa: F403

BEAT_TEST_QUEUE = os.environ.get("TOMORI_BEAT_TEST_QUEUE", "tomori-beat-test")

CELERY_BEAT_SCHEDULE = {
    "refresh-openrouter-catalogs": {
        "task": "caches.refresh_openrouter_catalogs",
        "schedule": 3600.0,
        "options": {"queue": BEAT_TEST_QUEUE},  # never consumed: the test reads it
    }
}
TOMORI_BEAT_AT_START = {"refresh-openrouter-catalogs": 30.0}
