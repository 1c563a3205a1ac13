"""App config for caches."""

from django.apps import AppConfig


class CachesConfig(AppConfig):
    name = "caches"
