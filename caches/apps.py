"""App config for caches: builds the cache registry, wires the signals and the bus's log words."""

import logging
from typing import Any

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

logger = logging.getLogger(__name__)


class CachesConfig(AppConfig):
    name = "caches"

    def ready(self) -> None:
        """Build every layer's caches from settings, then connect the receivers.

        Every process builds the registry here (web and Celery read the
        layers' key shapes and policies from it; the worker serves from it).
        """
        from caches.bus.core import set_event_describer
        from caches.catalogs.endpoints import CATALOG_NAMES
        from caches.catalogs.service import registry_name
        from caches.invalidation import connect_signals, tracking
        from caches.invalidation.describe import describe
        from caches.layers import build_registry
        from caches.registry import registry
        from tomori.models.base import install_change_tracker

        install_change_tracker(tracking)
        build_registry()
        # Only bot workers hold the catalogs; their events are not unknown here.
        registry.held_elsewhere = frozenset(registry_name(c) for c in CATALOG_NAMES)
        connect_signals()
        set_event_describer(describe)
        setting_changed.connect(
            rebuild_on_setting_change, dispatch_uid="caches.rebuild_layers"
        )


def rebuild_on_setting_change(*, setting: str, **_: Any) -> None:
    """Rebuild the layers built from `setting` (override_settings in tests).

    A value the typed settings reject leaves the layers as they were: the
    error is logged here and raised by `knobs()` wherever it is read.
    """
    from caches.layers import rebuild_layers_reading

    try:
        rebuild_layers_reading(setting)
    except ImproperlyConfigured as exc:
        logger.error("cache layers not rebuilt for %s: %s", setting, exc)
