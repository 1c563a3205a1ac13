"""Clear one cache, or one key of it, on every live bot worker (or on one: --worker)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from caches.operations import clear_cache_command, invalidate_key_command
from tomori.management.commands._operator import (
    add_timeout_argument,
    add_worker_argument,
    operator_errors,
    send_and_report,
)


class Command(BaseCommand):
    help = (
        "Clear cache NAME (or only --key KEY of it) on every live bot worker, "
        "or on --worker ID alone."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="cache name, e.g. tomori_state")
        parser.add_argument("--key", help="drop only this key (the layer's key shape)")
        add_worker_argument(parser)
        add_timeout_argument(parser)

    @operator_errors()
    def handle(self, *args: Any, **options: Any) -> None:
        name, key = options["name"], options["key"]
        sending = {"timeout": options["timeout"], "worker": options["worker"]}
        if key is None:
            send_and_report(self, clear_cache_command, name=name, **sending)
        else:
            send_and_report(self, invalidate_key_command, name=name, key=key, **sending)
