"""Shared plumbing of the operator commands: --timeout, sending, per-worker output, faults."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from caches.bus import BusUnavailable
from caches.live import LiveDataUnavailable
from caches.operations import (
    DATABASE_ERRORS,
    OperationError,
    OperationOutcome,
    database_fault,
    describe_command,
    on_worker_command,
    send_command,
)
from tomori.domain.knobs import knobs

ISSUER = "manage.py"


def add_timeout_argument(parser: CommandParser, default: float | None = None) -> None:
    """Add --timeout (seconds to wait for the workers' replies)."""
    if default is None:
        default = knobs().CACHE_COMMAND_TIMEOUT_SECONDS
    parser.add_argument(
        "--timeout",
        type=float,
        default=default,
        help=f"seconds to wait for worker replies (default {default:g})",
    )


def add_worker_argument(parser: CommandParser) -> None:
    """Add --worker (run on that live worker alone, as its dashboard page does)."""
    parser.add_argument(
        "--worker",
        default="",
        metavar="ID",
        help="run on this live worker alone (its id, as the dashboard shows it)",
    )


@contextmanager
def operator_errors() -> Iterator[None]:
    """Turn an unreachable Redis or database into one CommandError line, no traceback.

    Also a decorator: `@operator_errors()` on a command's `handle`.
    """
    try:
        yield
    except (BusUnavailable, LiveDataUnavailable) as exc:
        raise CommandError(str(exc)) from None
    except DATABASE_ERRORS as exc:
        raise CommandError(database_fault(exc)) from None


def send_and_report(
    command: BaseCommand,
    build: Any,
    *,
    timeout: float,
    worker: str = "",
    **params: Any,
) -> OperationOutcome:
    """Build an operator command (for `worker` alone if named), send it, print the replies."""
    try:
        operator_command = build(issued_by=ISSUER, **params)
        if worker:
            operator_command = on_worker_command(operator_command, worker)
    except OperationError as exc:
        raise CommandError(str(exc)) from exc
    outcome = send_command(operator_command, timeout=timeout)
    if not outcome.answered:
        raise CommandError(outcome.summary())
    command.stdout.write(outcome.summary())
    for line in outcome.lines():
        command.stdout.write(f"  {line}")
    if not outcome.ok:
        errors = "; ".join(r.error for r in outcome.replies if r.error)
        raise CommandError(
            f"{describe_command(operator_command)}: failed on a worker: {errors}"
        )
    return outcome
