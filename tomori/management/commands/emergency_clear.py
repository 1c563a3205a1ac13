"""Run the emergency cache clear on every live bot worker."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from caches.operations import emergency_clear_command, emergency_plan
from tomori.management.commands._operator import (
    add_timeout_argument,
    operator_errors,
    send_and_report,
)


class Command(BaseCommand):
    help = (
        "Run the emergency clear on every live worker: recoverable caches are "
        "cleared, short-term memory keeps its live entries unless --include-stm."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--include-stm",
            action="store_true",
            help="also clear non-expired short-term memory (last resort)",
        )
        add_timeout_argument(parser)

    @operator_errors()
    def handle(self, *args: Any, **options: Any) -> None:
        include_stm = options["include_stm"]
        plan = emergency_plan(include_short_term_memory=include_stm)
        self.stdout.write("clears: " + (", ".join(plan.cleared) or "none"))
        if plan.expired_only:
            self.stdout.write("expired entries only: " + ", ".join(plan.expired_only))
        self.stdout.write("preserves: " + (", ".join(plan.preserved) or "none"))
        send_and_report(
            self,
            emergency_clear_command,
            timeout=options["timeout"],
            include_short_term_memory=include_stm or None,
        )
