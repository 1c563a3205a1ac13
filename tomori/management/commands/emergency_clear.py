"""Run the emergency cache clear on every live bot worker, once the operator confirms."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from caches import bus
from caches.operations import EmergencyPlan, emergency_clear_command, emergency_plan
from tomori.management.commands._operator import (
    add_timeout_argument,
    add_worker_argument,
    operator_errors,
    send_and_report,
)

QUESTION = "Clear these caches on {where}? [y/N] "
NO_TERMINAL = (
    "the emergency clear empties every clearable cache on every live worker: "
    "pass --yes to run it without a terminal to confirm on"
)


class Command(BaseCommand):
    help = (
        "Run the emergency clear on every live worker: recoverable caches are "
        "cleared, short-term memory keeps its live entries unless --include-stm. "
        "Asks first unless --yes."
    )
    # call_command(..., stdin=...) answers the question in tests (as createsuperuser).
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--include-stm",
            action="store_true",
            help="also clear non-expired short-term memory (last resort)",
        )
        parser.add_argument(
            "--yes",
            "--no-input",
            "--noinput",
            dest="yes",
            action="store_true",
            help="do not ask for confirmation (scripts, runbooks)",
        )
        add_worker_argument(parser)
        add_timeout_argument(parser)

    @operator_errors()
    def handle(self, *args: Any, **options: Any) -> None:
        include_stm = options["include_stm"]
        stdin: TextIO = options.get("stdin") or sys.stdin
        ask = not options["yes"]
        if ask and not stdin.isatty():
            raise CommandError(NO_TERMINAL)
        plan = emergency_plan(include_short_term_memory=include_stm)
        # A plan printed above "nothing was sent" reads as done: under a dead
        # bus the command says only the error.
        bus.require_sendable(timeout=options["timeout"])
        self._print_plan(plan)
        where = (
            f"worker {options['worker']}" if options["worker"] else "every live worker"
        )
        if ask and not self._confirmed(stdin, where):
            self.stdout.write("Emergency clear cancelled: nothing was cleared.")
            return
        send_and_report(
            self,
            emergency_clear_command,
            timeout=options["timeout"],
            worker=options["worker"],
            include_short_term_memory=include_stm or None,
        )

    def _print_plan(self, plan: EmergencyPlan) -> None:
        self.stdout.write("clears: " + (", ".join(plan.cleared) or "none"))
        if plan.expired_only:
            self.stdout.write("expired entries only: " + ", ".join(plan.expired_only))
        self.stdout.write("preserves: " + (", ".join(plan.preserved) or "none"))

    def _confirmed(self, stdin: TextIO, where: str) -> bool:
        """Ask on the terminal; return whether the answer is yes."""
        self.stdout.write(QUESTION.format(where=where), ending="")
        self.stdout.flush()
        try:
            answer = stdin.readline()
        except KeyboardInterrupt:  # Ctrl-C at the question is a no
            self.stdout.write("")
            return False
        return answer.strip().lower() in {"y", "yes"}
