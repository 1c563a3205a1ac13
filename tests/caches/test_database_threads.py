"""Which thread runs a database call: Django's database thread, the writes', a sync caller's."""

from __future__ import annotations

import contextvars
import threading

from asgiref.sync import async_to_sync, sync_to_async

from caches.database import run_db, run_db_writes

_request = contextvars.ContextVar("_request", default="none")


def _thread() -> tuple[int, str]:
    current = threading.current_thread()
    return current.ident or 0, current.name


async def test_reads_run_where_sync_to_async_would_run_them() -> None:
    """Django's one database thread: the thread of its connection, not the loop's."""
    ident, _ = await run_db(_thread)
    assert ident != threading.get_ident()
    assert ident == (await sync_to_async(_thread)())[0]  # asgiref's fixed thread


async def test_writes_run_in_their_own_thread() -> None:
    ident, name = await run_db_writes(_thread)
    assert name.startswith("tomori-db-writes")
    assert ident != (await run_db(_thread))[0]


def test_a_sync_callers_reads_run_in_its_own_thread() -> None:
    """Called through async_to_sync (the admin's views): the caller's thread, its connection."""
    ident, _ = async_to_sync(run_db)(_thread)
    assert ident == threading.get_ident()


async def test_the_callers_context_reaches_the_database_thread() -> None:
    _request.set("turn 7")
    assert await run_db(_request.get) == "turn 7"
    assert await run_db_writes(_request.get) == "turn 7"
