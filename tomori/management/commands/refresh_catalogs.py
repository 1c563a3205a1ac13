"""Refresh the OpenRouter catalogs on every live bot worker."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from caches.operations import refresh_catalogs_command
from tomori.management.commands._operator import (
    add_timeout_argument,
    add_worker_argument,
    operator_errors,
    send_and_report,
)

CATALOG_TIMEOUT = 30.0


class Command(BaseCommand):
    help = "Refresh the OpenRouter catalogs on every live worker (--fresh: ignore the rate limit)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--fresh", action="store_true", help="refresh even within the rate limit"
        )
        add_worker_argument(parser)
        add_timeout_argument(parser, default=CATALOG_TIMEOUT)

    @operator_errors()
    def handle(self, *args: Any, **options: Any) -> None:
        send_and_report(
            self,
            refresh_catalogs_command,
            timeout=options["timeout"],
            worker=options["worker"],
            fresh=options["fresh"],
        )
