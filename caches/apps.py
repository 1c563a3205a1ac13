"""App config for caches: wires the invalidation signals and the bus's log words."""

from django.apps import AppConfig


class CachesConfig(AppConfig):
    name = "caches"

    def ready(self) -> None:
        from caches.bus.core import set_event_describer
        from caches.invalidation import connect_signals
        from caches.invalidation.describe import describe

        connect_signals()
        set_event_describer(describe)
