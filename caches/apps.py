"""App config for caches: builds the cache registry, wires the signals and the bus's log words."""

import logging
from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import DatabaseError
from django.db.models.signals import post_migrate, pre_migrate

logger = logging.getLogger(__name__)


class CachesConfig(AppConfig):
    name = "caches"

    def ready(self) -> None:
        """Build every layer's caches from settings, then connect the receivers.

        Every process builds the registry here (web and Celery read the
        layers' key shapes and policies from it; the worker serves from it).
        """
        from caches.bus.applier import set_event_describer
        from caches.catalogs.endpoints import CATALOG_NAMES
        from caches.catalogs.service import registry_name
        from caches.invalidation import connect_signals, tracking
        from caches.invalidation.describe import describe
        from caches.layers import build_registry
        from caches.registry import registry
        from tomori.domain.models.base import install_change_tracker

        install_change_tracker(tracking)
        build_registry()
        # Only bot workers hold the catalogs; their events are not unknown here.
        registry.held_elsewhere = frozenset(registry_name(c) for c in CATALOG_NAMES)
        connect_signals()
        set_event_describer(describe)
        setting_changed.connect(
            rebuild_on_setting_change, dispatch_uid="caches.rebuild_layers"
        )
        pre_migrate.connect(
            unhook_capture_on_sqlite, sender=self, dispatch_uid="caches.unhook"
        )
        post_migrate.connect(
            sync_capture, sender=self, dispatch_uid="caches.sync_capture"
        )
        checks.register(check_capture, checks.Tags.database)
        checks.register(check_layer_knobs)


def check_layer_knobs(**_: Any) -> list[checks.CheckMessage]:
    """Report every malformed knob a layer declares itself, naming the variable."""
    from caches.layers import _knobs

    return [
        checks.Error(message, id="caches.E001", hint="See docs/settings.md.")
        for message in _knobs.errors()
    ]


def unhook_capture_on_sqlite(*, using: str, **_: Any) -> None:
    """Drop SQLite's capture triggers while migrations run; `sync_capture` restores them.

    SQLite alters a table by rebuilding and renaming it, which fails while a
    trigger on another table names it. PostgreSQL keeps its triggers: an
    outside write during a migration is still recorded.
    """
    from django.db import connections

    from caches.outbox import capture

    if connections[using].vendor == "sqlite":
        capture.drop_all(connections[using])


def sync_capture(*, using: str, **_: Any) -> None:
    """Refresh the change-capture triggers after every migrate (they follow the feeds).

    Not before the migration that installs them, nor after it was reverted.
    """
    from django.db import connections

    from caches.outbox import capture

    connection = connections[using]
    if not _capture_migrated(connection):
        return
    tables = set(connection.introspection.table_names())
    missing = sorted(set(capture.sources()) - tables)
    if missing:  # a partial migrate: the tables come with a later one
        logger.info("invalidation capture not synced: tables %s missing", missing)
        return
    capture.sync(connection)


def _capture_migrated(connection: Any) -> bool:
    from django.db.migrations.recorder import MigrationRecorder

    applied = MigrationRecorder(connection).applied_migrations()
    return ("caches", "0004_invalidation_capture") in applied


def check_capture(
    app_configs: Any = None, databases: Any = None, **_: Any
) -> list[checks.CheckMessage]:
    """Warn when a database's change capture differs from the layers' feeds."""
    from django.db import connections

    from caches.operations.faults import first_line
    from caches.outbox import capture

    found: list[checks.CheckMessage] = []
    for alias in databases or ():
        connection = connections[alias]
        try:
            if not _capture_migrated(connection):
                continue  # `migrate` checks before it installs them
            problems = capture.differences(connection)
        except DatabaseError as exc:  # unreachable: other checks and commands say so
            logger.info("check caches.W020 skipped: %s", first_line(exc))
            continue
        for problem in problems:
            found.append(
                checks.Warning(
                    f"database {alias!r}: {problem}",
                    hint="Writes outside Django to that table would not reach "
                    "the caches. Run `manage.py migrate` to reinstall the "
                    "triggers the layers' feeds declare.",
                    id="caches.W020",
                )
            )
    return found


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
