"""Database outages as layers and the pipeline see them: a log, turn notes, recovery.

A layer that cannot read the database calls `database_failed(layer, exc)`
(whatever it then answers: a last good value, a fail-closed guess, nothing).
That writes to the one rate-limited `outage_log`, notes the failure on the
turn being resolved (so the pipeline can tell "database unavailable" from
"not configured"), and drops the connection the outage broke. The worker
calls `check_database()` every second: it writes the summary lines that are
due and, while an outage lasts, pings the database to log its end.
"""

from __future__ import annotations

import asyncio
import logging

from django.db import Error as DatabaseError

from caches.database import run_db
from caches.outage_log import OutageLog
from caches.turn_notes import _current
from tomori.domain.repositories import health

logger = logging.getLogger(__name__)

#: What a database read raises when the database is unreachable or too slow
#: (`run_db` raises TimeoutError past its deadline).
DB_ERRORS: tuple[type[BaseException], ...] = (DatabaseError, TimeoutError)

#: The process's one log of database outages.
outage_log = OutageLog("database", logger=logger)
#: Modules of the cache layers (a layer's name is the next part).
_LAYERS = "caches.layers."


_reset_task: asyncio.Task[None] | None = None


def database_failed(source: str, exc: BaseException) -> None:
    """Record that `source` could not read the database: log, note the turn, recover."""
    outage_log.failure(source, exc)
    notes = _current.get()
    if notes is not None:
        notes.failed.append(source)
    _drop_broken_connection_soon()


def served_stale(source: str) -> None:
    """Note on the current turn that `source` answered with its last good value."""
    notes = _current.get()
    if notes is not None:
        notes.stale.append(source)


def failing_layer(exc: BaseException, default: str = "pipeline") -> str:
    """Return the cache layer whose code raised `exc` (innermost), else `default`."""
    layer = default
    tb = exc.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module.startswith(_LAYERS):
            name = module[len(_LAYERS) :].split(".", 1)[0]
            if not name.startswith("_"):  # helpers (_support) are no layer
                layer = name
        tb = tb.tb_next
    return layer


def _drop_broken_connection_soon() -> None:
    # One at a time, and not awaited: behind a frozen query it waits its turn
    # in the database thread, and the failing read must not wait with it.
    global _reset_task
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    task = _reset_task
    if task is not None and not task.done() and task.get_loop() is loop:
        return
    _reset_task = loop.create_task(_drop_broken_connection())


async def _drop_broken_connection() -> None:
    try:
        await run_db(health.drop_broken_connections)
    except Exception as exc:  # noqa: BLE001 (the next failure tries again)
        logger.debug("could not drop the broken connection: %s", exc)


async def check_database() -> None:
    """Write the summaries due; during an outage, ping, and log its end on an answer."""
    outage_log.flush()
    if not outage_log.active:
        return
    try:
        await run_db(health.ping_database)
    except Exception:  # noqa: BLE001 (still down: the failures say why)
        return
    outage_log.success()
