"""Database calls from the event loop: a deadline on each, a breaker while the database hangs.

Django's async path runs every query in one database thread. A database that
accepts connections but never answers (frozen, partitioned) blocks that
thread in a read that neither `statement_timeout` (the server never sees the
query) nor TCP (the kernel acknowledges) ends, and every later call queues
behind it. So each call gets a deadline here (DB_CALL_TIMEOUT_SECONDS), and
once a call has been running past it the breaker refuses calls for
DB_BREAKER_OPEN_SECONDS, then lets one probe through: turns during a hang
fail fast instead of each waiting out the deadline.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import AsyncToSync, SyncToAsync, sync_to_async
from django.db import Error, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from caches.core.breaker import CLOSED, CircuitBreaker
from caches.core.clock import Clock
from tomori.domain.knobs import knobs

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


class DatabaseUnavailable(OperationalError, TimeoutError):
    """The database did not answer within the deadline, or is refused calls for now.

    Both a builtin `TimeoutError` (the pipeline's "database unavailable") and
    a `django.db.OperationalError` (what the layers' stale fallbacks catch).
    """


class _Lane:
    """One database thread's calls: its breaker, and when its running call started."""

    def __init__(self, name: str, clock: Clock) -> None:
        self.name = name
        self.breaker = CircuitBreaker(open_seconds=1.0, clock=clock)
        # Thread id -> when the call that thread is running started
        # (time.monotonic: deadlines are real time whatever the breaker's clock).
        self.started: dict[int, float] = {}

    def stuck(self, older_than: float) -> int:
        now = time.monotonic()
        return sum(1 for t in list(self.started.values()) if now - t >= older_than)


#: A database thread idle this long checks its connections before its next
#: call (one `SELECT 1`, outside Django's cursor: not counted as a query).
IDLE_CHECK_SECONDS = 1.0


class ConnectionChecks:
    """Before a call, drop a database thread's connections that died while unused.

    A worker has no request boundaries, where Django checks its connections,
    and a connection that sat idle while the database restarted or a proxy
    cut it looks open until its next query fails. So a thread checks its
    open connections (outside a transaction) before a call when it has been
    idle IDLE_CHECK_SECONDS (`clock`), or when any database thread has seen
    a database error since its last call: the call that follows reconnects
    instead of failing once.
    """

    def __init__(self, *, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.failures = 0  # database errors seen on any database thread
        self.checked = 0  # connections checked (tests, diagnostics)
        self.dropped = 0  # of them, found dead and closed
        self._lock = threading.Lock()  # the counters: two threads write them
        self._local = threading.local()

    def reset_threads(self) -> None:
        """Forget each thread's last call (tests that swap the clock)."""
        self._local = threading.local()

    def before_call(self) -> None:
        """Check this thread's connections if it idled or an error was seen since."""
        local = self._local
        last, seen = getattr(local, "last", None), getattr(local, "failures", None)
        now = local.last = self.clock()
        failures = local.failures = self.failures
        if last is None or (seen == failures and now - last < IDLE_CHECK_SECONDS):
            return
        checked, dropped = _each_open_connection(_close_if_dead, "before a call")
        with self._lock:
            self.checked += checked
            self.dropped += dropped

    def after_call(self, *, failed: bool) -> None:
        """Note the end of this thread's call (and a database error, for the others)."""
        local = self._local
        local.last = self.clock()
        if failed:
            with self._lock:
                self.failures += 1
            # This thread checks on its next call too (an error is rare): it
            # dropped what its own error broke, not what another's may have.
            local.failures = -1


class DatabaseCalls:
    """Sync database functions run in a database thread, each within a deadline.

    Two threads, each a lane with its own breaker: cache reads (Django's
    async thread, `run`) and short-term memory's write-behind (`run_writes`).
    A call hung on one connection refuses that lane's calls only: reads no
    longer queue behind writes, so a hung write is no reason to refuse them.
    """

    def __init__(self, *, clock: Clock = time.monotonic) -> None:
        self._reads = _Lane("reads", clock)
        self._writes = _Lane("writes", clock)
        self.breaker = self._reads.breaker  # the cache reads' (the turns')
        self.writes_breaker = self._writes.breaker
        self.timeouts = 0
        self.checks = ConnectionChecks()

    def set_clock(self, clock: Clock) -> None:
        """Time the breakers' open intervals with `clock` (tests)."""
        self.breaker.clock = clock
        self.writes_breaker.clock = clock

    def stuck_calls(self, *, older_than: float) -> int:
        """Return how many calls have been running in the database for `older_than` s."""
        return self._reads.stuck(older_than) + self._writes.stuck(older_than)

    async def run(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Return `fn(*args, **kwargs)` run in the database thread; raise DatabaseUnavailable."""
        # None from a sync caller's thread (async_to_sync): asgiref's routing.
        return await self._run(self._reads, _database_thread(), fn, *args, **kwargs)

    async def run_writes(
        self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs
    ) -> R:
        """Like `run`, in the write-behind's own thread (and connection): see `WRITES`."""
        return await self._run(self._writes, WRITES, fn, *args, **kwargs)

    async def _run(
        self,
        lane: _Lane,
        executor: Executor | None,
        fn: Callable[P, R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        breaker = lane.breaker
        breaker.open_seconds = knobs().DB_BREAKER_OPEN_SECONDS
        if not breaker.allow():
            raise DatabaseUnavailable("the database is not answering: call refused")
        timeout = knobs().DB_CALL_TIMEOUT_SECONDS
        tracked = self._tracked(fn, lane)
        try:
            async with asyncio.timeout(timeout):
                if executor is None:
                    result = await sync_to_async(tracked)(*args, **kwargs)
                else:
                    result = await _in_thread(executor, tracked, *args, **kwargs)
        except TimeoutError:
            self._timed_out(lane, timeout)
            raise DatabaseUnavailable(
                f"no answer from the database within {timeout:g} s"
            ) from None
        except asyncio.CancelledError:
            breaker.abandoned()
            raise
        except BaseException:
            self._answered(lane)  # an error is an answer too
            raise
        self._answered(lane)
        return result

    def _tracked(self, fn: Callable[P, R], lane: _Lane) -> Callable[P, R]:
        started, checks = lane.started, self.checks

        def tracked(*args: P.args, **kwargs: P.kwargs) -> R:
            ident = threading.get_ident()
            started[ident] = time.monotonic()  # the check is inside the deadline
            failed = False
            try:
                checks.before_call()
                return fn(*args, **kwargs)
            except Error:  # DatabaseError, and InterfaceError ("connection closed")
                failed = True
                _drop_broken_connections()
                raise
            finally:
                checks.after_call(failed=failed)
                started.pop(ident, None)

        return tracked

    def _timed_out(self, lane: _Lane, timeout: float) -> None:
        self.timeouts += 1
        breaker = lane.breaker
        if not lane.stuck(timeout):
            # Queued behind busy (not hung) calls: no reason to refuse others.
            breaker.abandoned()
            return
        if breaker.state == CLOSED:
            logger.warning(
                "database: a call has had no answer for %g s (%s); refusing "
                "those calls, probing every %g s",
                timeout,
                lane.name,
                breaker.open_seconds,
            )
        breaker.failed()

    def _answered(self, lane: _Lane) -> None:
        breaker = lane.breaker
        if breaker.state != CLOSED:
            logger.warning(
                "database: answering again (%s; %d calls refused so far)",
                lane.name,
                breaker.refused,
            )
        breaker.succeeded()


def _database_thread() -> Executor | None:
    """Return Django's database thread when `sync_to_async` would pick it; else None.

    The worker's event loop has no sync caller above it, so asgiref's
    thread-sensitive calls all run in its one fixed thread
    (`SyncToAsync.single_thread_executor`). Calls from a sync thread
    (`async_to_sync`: the admin's views, a test) return None: they take
    asgiref's own path, which runs them in that thread (its connection).
    """
    if getattr(AsyncToSync.executors, "current", None) is not None:
        return None
    if SyncToAsync.thread_sensitive_context.get(None) is not None:
        return None
    if AsyncToSync.loop_thread_executors and (
        asyncio.get_running_loop() in AsyncToSync.loop_thread_executors
    ):
        return None
    return SyncToAsync.single_thread_executor


def _in_thread(
    executor: Executor, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs
) -> asyncio.Future[R]:
    """Run `fn` in `executor`'s thread, in a copy of the caller's context.

    What `sync_to_async` does for these calls, without its per-call
    machinery (a shield, a context restore, a thread handler): a call that
    does nothing costs the process 113 us of CPU this way, 144 us through
    `sync_to_async` under `wait_for`, 89 us handed over bare
    (`benchmarks/db_call_overhead.py`). Cancelling the returned future
    leaves a running call to finish and drops a queued one.
    """
    context = contextvars.copy_context()
    return asyncio.get_running_loop().run_in_executor(
        executor, functools.partial(context.run, fn, *args, **kwargs)
    )


def _close_if_dead(conn: BaseDatabaseWrapper) -> bool:
    if conn.is_usable():
        return False
    conn.close()
    return True


def _close_if_broken(conn: BaseDatabaseWrapper) -> bool:
    conn.close_if_unusable_or_obsolete()
    return False  # not counted


def _each_open_connection(
    close: Callable[[BaseDatabaseWrapper], bool], when: str
) -> tuple[int, int]:
    """Run `close` on this thread's open connections outside a transaction.

    Returns (connections seen, connections `close` closed). Best effort: a
    failure is logged, never raised, so the call itself says what is wrong.
    """
    seen = closed = 0
    for conn in connections.all(initialized_only=True):
        if conn.connection is None or conn.in_atomic_block:
            continue
        seen += 1
        try:
            closed += close(conn)
        except Exception:
            logger.warning(
                "database: could not check connection %s %s",
                conn.alias,
                when,
                exc_info=True,
            )
    return seen, closed


def _drop_broken_connections() -> None:
    """Close this thread's connections that an error left unusable (they never reconnect)."""
    _each_open_connection(_close_if_broken, "after a failed call")


_calls = DatabaseCalls()

#: The write-behind's database thread. Django's async path runs every query
#: in one thread, in order, so a durable batch (its INSERT and its COMMIT's
#: WAL flush) held up every cache miss queued behind it. Writes that turns
#: only queue get a thread and a connection of their own; readers that must
#: see them overlay what is queued, in flight and committed meanwhile
#: (`DurableWriter.reading` and `overlay`), not the thread's order.
WRITES = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tomori-db-writes")


def database_calls() -> DatabaseCalls:
    """Return this process's database call guard (its breaker, its counters)."""
    return _calls


async def run_db_writes(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run a sync write-behind function in its own database thread, within a deadline.

    Deadline and breaker as `run_db`. Short-term memory's durable batches run
    here, so a cache miss never queues behind one (nor behind its commit).
    """
    return await database_calls().run_writes(fn, *args, **kwargs)


def close_thread_connections(timeout: float = 30) -> None:
    """Close the connections of both database threads (tests, before a database goes)."""
    for executor in (SyncToAsync.single_thread_executor, WRITES):
        executor.submit(connections.close_all).result(timeout)


async def run_db(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run a sync repository function in Django's database thread, within a deadline.

    Raises `DatabaseUnavailable` (a `TimeoutError` and a `django.db.Error`)
    when no answer comes within DB_CALL_TIMEOUT_SECONDS, or at once while the
    breaker refuses calls to a hung database.
    """
    return await database_calls().run(fn, *args, **kwargs)
