"""Delete metric_samples rows older than METRIC_SAMPLE_RETENTION_DAYS."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from metrics.repository import MetricSampleRepository
from tomori.domain.knobs import knobs


class Command(BaseCommand):
    help = "Delete metric samples past retention now (retention also rides the write path)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="only count what would be deleted"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        repository = MetricSampleRepository()
        days = knobs().METRIC_SAMPLE_RETENTION_DAYS
        if options["dry_run"]:
            count = repository.count_prunable()
            self.stdout.write(f"would delete {count} sample(s) older than {days} days")
            return
        deleted = repository.prune()
        self.stdout.write(
            self.style.SUCCESS(f"deleted {deleted} sample(s) older than {days} days")
        )
