"""Tests of the Celery tasks and beat (`tomori.tasks`)."""
