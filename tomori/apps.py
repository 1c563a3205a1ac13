"""App config for the entry points: admin, management commands, system checks, Celery tasks.

The domain (models, migrations) is its own app, `tomori.domain`, labelled
"tomori" so its tables and migration history keep their names.
"""

from django.apps import AppConfig


class EntryPointsConfig(AppConfig):
    name = "tomori"
    label = "tomori_entry_points"
    verbose_name = "Tomori entry points"

    def ready(self) -> None:
        from tomori import checks  # noqa: F401 (registers the system checks)
