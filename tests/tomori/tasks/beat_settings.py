"""Settings for the Celery beat tests: the test settings with one fast, private schedule entry."""

import os

from tomori.settings_test import *  # noqa: F403

BEAT_TEST_QUEUE = os.environ.get("TOMORI_BEAT_TEST_QUEUE", "tomori-beat-test")

CELERY_BEAT_SCHEDULE = {
    "beat-test-tick": {
        "task": "tomori.beat_test_tick",  # never consumed: the test reads beat's log
        "schedule": 0.5,
        "options": {"queue": BEAT_TEST_QUEUE, "expires": 30},
    }
}
