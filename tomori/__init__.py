"""Tomori: a Discord bot's cache layers, run and steered from the Django admin."""

from tomori.celery import app as celery_app

__all__ = ["celery_app"]
