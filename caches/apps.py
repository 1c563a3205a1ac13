"""App config for caches: wires the invalidation signals at start-up."""

from django.apps import AppConfig


class CachesConfig(AppConfig):
    name = "caches"

    def ready(self) -> None:
        from caches.invalidation import connect_signals

        connect_signals()
