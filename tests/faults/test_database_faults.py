"""A hung or refusing PostgreSQL: bounded calls, a breaker, short-term memory kept and stored."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from asgiref.sync import SyncToAsync
from django.db import Error as DjangoDatabaseError
from django.db import connection

from caches.core import FakeClock
from caches.database import (
    IDLE_CHECK_SECONDS,
    DatabaseCalls,
    DatabaseUnavailable,
    database_calls,
    run_db,
    run_db_writes,
)
from caches.layers import short_term_memory as stm
from caches.outbox import OutboxFollower
from tests.caches.layers.short_term_memory.stm_helpers import message
from tests.support.faults import TcpProxy, until, wait_until
from tomori.domain.models import ShortTermMemoryRecord

db = pytest.mark.django_db(transaction=True)


def _select_one() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return int(cursor.fetchone()[0])


def _stored_turns() -> dict[str, int]:
    return dict(ShortTermMemoryRecord.objects.values_list("cache_key", "turn_count"))


async def _turn(user: int, channel: int) -> None:
    await stm.store_short_term_memory(
        user_disc_id=user,
        channel_disc_id=channel,
        server_disc_id=7,
        messages=[message(f"hello from {user}")],
    )


@db
async def test_a_hung_call_times_out_and_the_breaker_then_fails_fast(
    db_through_proxy: TcpProxy, settings, fake_clock: FakeClock
) -> None:
    settings.DB_CALL_TIMEOUT_SECONDS = 0.3
    settings.DB_BREAKER_OPEN_SECONDS = 5.0
    calls = database_calls()
    calls.set_clock(fake_clock)
    assert await run_db(_select_one) == 1  # a connection through the proxy
    db_through_proxy.freeze()
    with pytest.raises(TimeoutError):
        await run_db(_select_one)
    assert calls.breaker.state == "open" and calls.stuck_calls(older_than=0.3) == 1
    refused = calls.breaker.refused
    with pytest.raises(DatabaseUnavailable) as caught:
        await run_db(_select_one)  # refused without queueing behind the hung call
    assert isinstance(caught.value, DjangoDatabaseError)  # the layers' fallbacks
    assert calls.breaker.refused == refused + 1
    fake_clock.advance(4.9)
    with pytest.raises(DatabaseUnavailable):
        await run_db(_select_one)
    fake_clock.advance(0.1)
    with pytest.raises(TimeoutError):  # the probe goes, and the database still hangs
        await run_db(_select_one)
    assert calls.breaker.state == "open"
    fake_clock.advance(5.0)
    db_through_proxy.forward()
    assert await run_db(_select_one) == 1  # the probe is answered: closed again
    assert calls.breaker.state == "closed" and calls.stuck_calls(older_than=0) == 0


async def test_a_hung_write_refuses_writes_only(
    settings, fake_clock: FakeClock
) -> None:  # type: ignore[no-untyped-def]
    """Reads no longer queue behind the write-behind: its hang must not refuse them."""
    settings.DB_CALL_TIMEOUT_SECONDS = 0.2
    calls = database_calls()
    calls.set_clock(fake_clock)  # the breaker stays open until the test says
    hung = threading.Event()
    try:
        with pytest.raises(DatabaseUnavailable):
            await run_db_writes(hung.wait, 30)  # the writes' thread hangs
        await _until_writes_refused(calls)
        assert calls.breaker.state == "closed"
        assert await run_db(int, "7") == 7  # a read answers meanwhile
        with pytest.raises(DatabaseUnavailable, match="refused"):
            await run_db_writes(int, "7")
        assert calls.stuck_calls(older_than=0.1) == 1  # the worker's exit sees it
    finally:
        hung.set()


async def test_a_call_queued_past_its_deadline_never_runs(settings) -> None:  # type: ignore[no-untyped-def]
    """A timed-out call that had not started is dropped, not run after the deadline."""
    settings.DB_CALL_TIMEOUT_SECONDS = 0.2
    thread = SyncToAsync.single_thread_executor  # Django's database thread
    started, busy, ran = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        busy.wait(30)

    holding = thread.submit(hold)  # no deadline: the thread is taken until released
    assert await asyncio.to_thread(started.wait, 10)
    try:
        with pytest.raises(DatabaseUnavailable):
            await run_db(ran.set)  # queued behind the held thread
    finally:
        busy.set()
    await asyncio.wrap_future(holding)
    # The thread's queue is first in, first out: once this has run, so had the queued call.
    await asyncio.wrap_future(thread.submit(int))
    assert not ran.is_set()
    assert (
        database_calls().breaker.state == "closed"
    )  # queued, not hung: no reason to refuse


async def _until_writes_refused(calls: DatabaseCalls, timeout: float = 10.0) -> None:
    """Time writes out until the writes' breaker opens (bounded by `timeout`).

    A write that times out opens it once the hung call has run past the
    deadline in its thread. The first one usually has; on a loaded machine
    its thread may have picked it up late, and then the next write, queued
    behind it, times out and opens it: wait on the state, not on timing.
    """
    deadline = time.monotonic() + timeout
    while calls.writes_breaker.state != "open":
        assert time.monotonic() < deadline, "the writes' breaker never opened"
        with pytest.raises(DatabaseUnavailable):
            await run_db_writes(int, "7")


@db
async def test_a_refused_connection_fails_at_once_and_reconnects_after(
    db_through_proxy: TcpProxy,
) -> None:
    assert await run_db(_select_one) == 1
    db_through_proxy.refuse()
    with pytest.raises(DjangoDatabaseError):
        await run_db(_select_one)
    assert database_calls().breaker.state == "closed"  # an error is an answer
    db_through_proxy.forward()
    assert await run_db(_select_one) == 1  # the broken connection was dropped


@db
async def test_batches_refused_by_the_database_are_kept_until_it_is_back(
    db_through_proxy: TcpProxy, settings
) -> None:
    settings.SHORT_TERM_MEMORY_RETRY_MAX_SECONDS = 0.05
    store = stm.short_term_memory_store()
    users = range(1, 6)
    for user in users:  # hydrated and stored while the database answers
        await _turn(user, 70)
    await asyncio.wait_for(store.writer.flush(), 10)
    failures = store.writer.failures
    db_through_proxy.refuse()
    for _ in range(3):
        for user in users:
            await _turn(user, 70)  # cached keys: the turn needs no database
    await until(lambda: store.writer.failures >= failures + 2)
    assert store.writer.pending_count() > 0
    db_through_proxy.forward()
    await asyncio.wait_for(store.writer.flush(), 10)
    in_memory = {
        key: entry.turn_count
        for key, entry in store.cache.items()
        if isinstance(entry, stm.ShortTermMemoryEntry)
    }
    assert in_memory[stm.user_short_term_memory_key(1, 70)] == 4
    assert in_memory[stm.server_short_term_memory_key(7, 70)] == 20
    # The batches ran on the write-behind's own thread; the read thread sat
    # idle through the refusal, its connection cut. The writes' errors had it
    # check that connection first: this read reconnects instead of failing.
    assert await run_db(_stored_turns) == in_memory


@db
async def test_a_connection_cut_while_idle_reconnects_on_the_next_call(
    db_through_proxy: TcpProxy, fake_clock: FakeClock
) -> None:
    checks = database_calls().checks
    checks.clock = fake_clock
    assert await run_db(_select_one) == 1
    db_through_proxy.refuse()  # cuts the idle connection; no call sees it
    db_through_proxy.forward()
    fake_clock.advance(IDLE_CHECK_SECONDS - 0.01)
    assert await run_db(int, "3") == 3  # not idle long enough: no check
    checked, dropped = checks.checked, checks.dropped
    fake_clock.advance(IDLE_CHECK_SECONDS)
    assert await run_db(_select_one) == 1  # checked first: reconnects, no error
    assert (checks.checked, checks.dropped) == (checked + 1, dropped + 1)
    assert await run_db(_select_one) == 1  # used just now: no check
    assert checks.checked == checked + 1


@db
async def test_a_database_error_has_the_other_thread_check_its_connection(
    db_through_proxy: TcpProxy, fake_clock: FakeClock
) -> None:
    checks = database_calls().checks
    checks.clock = fake_clock  # no idle time passes: only the error tells
    assert await run_db(_select_one) == 1
    assert await run_db_writes(_select_one) == 1
    db_through_proxy.refuse()  # both threads' connections cut
    with pytest.raises(DjangoDatabaseError):
        await run_db_writes(_select_one)
    db_through_proxy.forward()
    dropped = checks.dropped
    assert await run_db(_select_one) == 1
    assert checks.dropped == dropped + 1
    assert await run_db_writes(_select_one) == 1  # its own error dropped its own
    assert checks.dropped == dropped + 1


@db
async def test_a_failing_connection_check_does_not_hide_the_callers_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.db import InterfaceError, OperationalError
    from django.db.backends.base.base import BaseDatabaseWrapper

    def failing_query() -> None:
        _select_one()  # the thread's connection is open
        raise OperationalError("server closed the connection unexpectedly")

    def broken_check(self: BaseDatabaseWrapper) -> None:
        raise InterfaceError("connection already closed")

    monkeypatch.setattr(
        BaseDatabaseWrapper, "close_if_unusable_or_obsolete", broken_check
    )
    with pytest.raises(OperationalError, match="closed the connection"):
        await run_db(failing_query)


@db
def test_stopping_the_outbox_follower_does_not_wait_on_a_read_the_frozen_database_holds(
    db_through_proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    follower = OutboxFollower(
        deliver=lambda rows: None,
        flush=lambda reason: None,
        interval=60.0,
        retention=600.0,
    )
    follower.start()
    try:
        assert wait_until(lambda: follower.tracker.high is not None, timeout=10)
        db_through_proxy.freeze()
        follower.wake()
        assert wait_until(lambda: follower._poll_started is not None, timeout=10)
        started = time.monotonic()
        ended = follower.stop(timeout=5.0)
        took = time.monotonic() - started
    finally:
        follower.stop(timeout=0)
    assert ended is False  # left to the process's exit: it only reads
    assert took < 1.0  # not the 5 s the join may take
    assert "not waiting for it" in caplog.text
