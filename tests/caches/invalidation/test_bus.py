"""The bus: message format, local delivery, Redis delivery, gaps, reconnects and commands."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from caches import bus
from caches.bus import Bus
from caches.bus.stats import LagWindow
from caches.messages import (
    REPLY_PREFIX,
    ClearAll,
    ClearCache,
    CommandMessage,
    EmergencyClear,
    InvalidationBatch,
    WorkerReply,
    encode,
)

WAIT = 10.0


class Recorder:
    """An apply/flush pair that remembers what it was asked to do, and on which thread."""

    def __init__(self) -> None:
        self.applied: list[tuple] = []
        self.threads: set[int] = set()
        self.flushes = 0

    def apply(self, events) -> None:
        self.threads.add(threading.get_ident())
        self.applied.extend(events)

    def flush(self) -> dict[str, int]:
        self.flushes += 1
        return {"test": 0}


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def worker(redis_url, bus_channel, recorder) -> Iterator[Bus]:
    """A subscribed bus on a fresh channel, applying into `recorder`."""
    subscribed = Bus(redis_url=redis_url, channel=bus_channel, worker_id="w1")
    subscribed.start_subscriber(apply=recorder.apply, flush=recorder.flush)
    assert subscribed.stats.wait_for(lambda s: s["flushes"] >= 1, WAIT)
    yield subscribed
    subscribed.close()


@pytest.fixture
def other(redis_url, bus_channel) -> Iterator[Bus]:
    """Another process's bus on the same channel (applies nothing locally)."""
    sender = Bus(redis_url=redis_url, channel=bus_channel, apply=lambda events: None)
    yield sender
    sender.close()


@pytest.fixture
def raw(redis_url) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _publish(raw, channel, *, origin, seq, events=(("tomori_state", "key", (1,)),)):
    message = InvalidationBatch(
        origin=origin, seq=seq, sent_at=time.time(), events=tuple(events)
    )
    raw.publish(channel, encode(message))


def _clear_all() -> ClearAll:
    return ClearAll.issue(issued_by="test")


def _reply(**fields) -> WorkerReply:
    return WorkerReply(worker_id="", **fields)


# ------------------------------------------------------------------ format


def test_a_malformed_message_is_dropped_and_the_subscriber_carries_on(
    worker, raw, recorder, caplog
):
    raw.publish(worker.channel, b'{"v": 1, "kind": "invalidate", "origin": 7}')
    raw.publish(worker.channel, b"not json")
    _publish(raw, worker.channel, origin="remote", seq=1)

    assert worker.stats.wait_for(lambda s: s["applied"] == 1, WAIT)
    assert worker.snapshot()["rejected"] == 2
    assert recorder.applied == [("tomori_state", "key", (1,))]
    assert "dropped a malformed message" in caplog.text


def test_lag_window_percentiles():
    window = LagWindow(size=100)
    for ms in range(1, 201):
        window.add(ms / 1000)
    summary = window.summary()
    assert summary["count"] == 200 and summary["window"] == 100
    assert summary["p50_ms"] == pytest.approx(150)
    assert summary["p99_ms"] == pytest.approx(199)
    assert summary["max_ms"] == pytest.approx(200)


# ------------------------------------------------------------------ local


def test_local_bus_applies_in_process_and_measures_lag(recorder):
    local = Bus(apply=recorder.apply, flush=recorder.flush)
    local.broadcast([("user", "key", (7,))])
    stats = local.snapshot()
    assert recorder.applied == [("user", "key", (7,))]
    assert stats["mode"] == "local" and stats["applied"] == 1
    assert stats["lag"]["count"] == 1


def test_local_bus_hands_events_to_the_event_loop_thread(recorder):
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        local = Bus()
        local.start_subscriber(apply=recorder.apply, flush=recorder.flush, loop=loop)
        local.broadcast([("user", "key", (7,))])
        assert local.stats.wait_for(lambda s: s["applied"] == 1, WAIT)
        assert recorder.threads == {thread.ident}
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT)
        loop.close()


def test_module_functions_use_the_configured_bus(recorder):
    configured = bus.configure(redis_url="", channel="tomori:test:module")
    bus.start_subscriber(apply=recorder.apply)
    bus.broadcast([("llm", "reload", ())])
    assert bus.get_bus() is configured
    assert bus.stats()["channel"] == "tomori:test:module"
    assert bus.wait_for(lambda s: s["applied"] == 1, timeout=WAIT)
    assert recorder.applied == [("llm", "reload", ())]


# ------------------------------------------------------------------ redis


def test_other_process_messages_are_applied_with_lag(worker, other, recorder):
    other.broadcast([("tomori_state", "key", (42,))])

    assert worker.stats.wait_for(lambda s: s["applied"] == 1, WAIT)
    assert recorder.applied == [("tomori_state", "key", (42,))]
    assert worker.snapshot()["lag"]["count"] == 1
    # Counted by the sender thread once Redis answered (maybe after delivery).
    assert other.stats.wait_for(lambda s: s["published"] == 1, WAIT)


def test_each_applied_batch_is_one_log_line_naming_its_origin(
    worker, other, recorder, caplog
):
    caplog.set_level("INFO", logger="caches.bus.applier")
    other.broadcast([("user", "key", (7,)), ("tomori_state", "key", (8,))])
    assert worker.stats.wait_for(lambda s: s["applied"] == 1, WAIT)
    lines = [
        r.getMessage() for r in caplog.records if "invalidated from" in r.getMessage()
    ]
    assert lines == [
        f"invalidated from {other.origin}: user 7; Tomori state of server 8"
    ]


def test_own_messages_are_skipped(worker, raw, recorder):
    _publish(raw, worker.channel, origin=worker.origin, seq=1)

    assert worker.stats.wait_for(lambda s: s["own_skipped"] == 1, WAIT)
    assert recorder.applied == []


def test_sequence_gap_flushes_and_duplicates_are_harmless(worker, raw, recorder):
    _publish(raw, worker.channel, origin="remote", seq=1)
    _publish(raw, worker.channel, origin="remote", seq=3)  # seq 2 was lost
    _publish(raw, worker.channel, origin="remote", seq=3)  # delivered twice
    _publish(raw, worker.channel, origin="remote", seq=4)

    assert worker.stats.wait_for(lambda s: s["received"] == 4, WAIT)
    stats = worker.snapshot()
    assert stats["gaps"] == 1 and stats["duplicates"] == 1
    assert stats["flushes"] == 2  # subscribe + gap
    assert len(recorder.applied) == 3


def test_killed_connection_flushes_and_resubscribes(worker, other, raw, recorder):
    killed = 0
    for client in raw.client_list(_type="pubsub"):
        if client.get("name") == worker.subscriber_name:
            killed += raw.client_kill_filter(_id=client["id"])
    assert killed == 1

    assert worker.stats.wait_for(lambda s: s["flushes"] >= 2 and s["connected"], WAIT)
    assert worker.snapshot()["disconnects"] >= 1
    other.broadcast([("user", "key", (1,))])
    assert worker.stats.wait_for(lambda s: s["applied"] == 1, WAIT)


def test_publish_failure_does_not_block_or_raise_and_is_logged_once(caplog, recorder):
    down = Bus(redis_url="redis://127.0.0.1:1/15", channel="tomori:test:down")
    down.start_subscriber(apply=recorder.apply, flush=recorder.flush)
    try:
        for n in range(3):
            down.broadcast([("user", "key", (n,))])
        assert len(recorder.applied) == 3  # local delivery happens at once
        assert down.stats.wait_for(lambda s: s["publish_failures"] >= 2, WAIT)
        stats = down.snapshot()
    finally:
        down.close(drain_timeout=0)

    assert stats["backlog"] == 3 and stats["published"] == 0
    assert caplog.text.count("cannot publish to Redis") == 1
    assert "exiting with 3 unpublished invalidation message(s)" in caplog.text
    assert "catch them up from the outbox" in caplog.text


def test_backlog_is_published_in_order_once_redis_answers(
    redis_url, bus_channel, worker, recorder
):
    sender = Bus(redis_url="redis://127.0.0.1:1/15", channel=bus_channel)
    try:
        sender.broadcast([("user", "key", (1,))])
        sender.broadcast([("user", "key", (2,))])
        # Redis comes back: point the publisher's pool at the live server.
        sender._publisher.client = redis.Redis.from_url(redis_url)
        assert worker.stats.wait_for(lambda s: s["applied"] == 2, WAIT)
    finally:
        sender.close()
    assert recorder.applied == [("user", "key", (1,)), ("user", "key", (2,))]
    assert worker.snapshot()["gaps"] == 0


def test_stop_joins_promptly(redis_url, bus_channel, recorder):
    subscribed = Bus(redis_url=redis_url, channel=bus_channel)
    subscribed.start_subscriber(apply=recorder.apply, flush=recorder.flush)
    assert subscribed.stats.wait_for(lambda s: s["connected"], WAIT)
    started = time.monotonic()
    subscribed.stop()
    assert time.monotonic() - started < 1.0
    assert not subscribed.snapshot()["connected"]
    subscribed.close()


# ------------------------------------------------------------------ commands


def test_send_command_round_trip_over_redis(worker, other):
    seen = []

    def handler(command):
        seen.append(threading.current_thread().name)
        return _reply(
            ok=True, removed=3, op=command.op, details={"cache": command.cache}
        )

    worker.set_command_handler(handler)
    started = time.monotonic()
    replies = other.send_command(
        ClearCache.issue(cache="user", issued_by="test"), timeout=5.0
    )

    assert time.monotonic() - started < 2.0  # every live worker answered: no waiting
    assert len(replies) == 1
    assert replies[0].op == "clear_cache" and replies[0].removed == 3
    assert replies[0].details == {"cache": "user"}
    assert replies[0].worker_id == "w1" and replies[0].origin == worker.origin
    assert seen and seen[0].startswith("tomori-bus-command")


def test_send_command_runs_an_async_handler_on_the_worker_loop(
    redis_url, bus_channel, other, recorder
):
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    subscribed = Bus(redis_url=redis_url, channel=bus_channel, worker_id="w2")
    try:
        subscribed.start_subscriber(
            apply=recorder.apply, flush=recorder.flush, loop=loop
        )
        assert subscribed.stats.wait_for(lambda s: s["connected"], WAIT)

        async def handler(command):
            return _reply(ok=True, details={"thread": threading.get_ident()})

        subscribed.set_command_handler(handler)
        replies = other.send_command(_clear_all(), timeout=5.0)
        assert [r.details["thread"] for r in replies] == [thread.ident]
    finally:
        subscribed.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT)
        loop.close()


def test_handler_errors_become_failed_replies(worker, other):
    def handler(command):
        raise ValueError("no such cache")

    worker.set_command_handler(handler)
    command = ClearCache.issue(cache="nope", issued_by="test")
    [reply] = other.send_command(command, timeout=5.0)
    assert reply.ok is False and "no such cache" in (reply.error or "")
    assert reply.command_id == command.id and reply.worker_id == "w1"


def test_processes_without_a_handler_do_not_reply_but_do_not_delay(worker, other):
    started = time.monotonic()
    assert other.send_command(_clear_all(), timeout=5.0) == []
    assert time.monotonic() - started < 2.0


def test_send_command_in_process_calls_the_handler_directly():
    local = Bus(worker_id="embedded")
    assert local.send_command(_clear_all(), timeout=1.0) == []
    local.set_command_handler(lambda command: _reply(ok=True, op=command.op))
    assert local.send_command(_clear_all(), timeout=1.0) == [
        WorkerReply(ok=True, op="clear_all", worker_id="embedded", origin=local.origin)
    ]


def test_a_command_published_after_its_timeout_is_not_run(worker, raw):
    ran = []
    worker.set_command_handler(lambda command: ran.append(command) or _reply(ok=True))
    late = CommandMessage(
        origin="admin",
        seq=1,
        sent_at=time.time() - 60,
        id="x",
        reply_to=REPLY_PREFIX + "x",
        timeout=3.0,
        command=EmergencyClear.issue(issued_by="test"),
    )
    raw.publish(worker.channel, encode(late))

    assert worker.stats.wait_for(lambda s: s["commands_expired"] == 1, WAIT)
    assert ran == []


def test_a_large_write_is_published_by_its_outbox_rows(worker, other, recorder):
    """Its receivers read it from the outbox (parsed on their loop in steps),
    never one huge message on the subscriber thread."""
    from caches.bus.core import MAX_INLINE_EVENTS

    woken: list[int] = []
    worker.applier.catch_up = lambda: woken.append(1)  # the outbox follower's wake
    large = [("user", "key", (i,)) for i in range(MAX_INLINE_EVENTS + 1)]
    other.broadcast(large, outbox_ids=[424242])
    assert worker.stats.wait_for(lambda s: s["by_outbox"] == 1, WAIT)
    assert woken == [1] and recorder.applied == []

    small = large[:MAX_INLINE_EVENTS]  # at the limit: inline, as before
    other.broadcast(small, outbox_ids=[424243])
    assert worker.stats.wait_for(lambda s: s["applied"] == 1, WAIT)
    assert recorder.applied == small and woken == [1]


# ------------------------------------------------------------ one worker alone


def _filled_worker(redis_url, channel, worker_id: str):  # type: ignore[no-untyped-def]
    """A subscribed bus answering with the real handler, over a registry of its own."""
    from caches.core import BoundedTTLCache
    from caches.operations import WorkerContext, make_command_handler
    from caches.registry import CacheRegistry, EmergencyPolicy

    registry = CacheRegistry()
    cache: BoundedTTLCache[int, str] = BoundedTTLCache("c", maxsize=10)
    registry.register("c", cache, policy=EmergencyPolicy.CLEAR)
    for key in range(3):
        cache.set(key, "v")
    context = WorkerContext(worker_id=worker_id, registry=registry)
    subscribed = Bus(redis_url=redis_url, channel=channel, worker_id=worker_id)
    subscribed.set_command_handler(make_command_handler(context))
    subscribed.start_subscriber(flush=lambda: {})
    assert subscribed.stats.wait_for(lambda s: s["connected"], WAIT)
    return subscribed, context, cache


def test_a_command_for_one_worker_runs_there_alone(redis_url, bus_channel, other):
    from caches.messages import OnWorker

    w1, ctx1, cache1 = _filled_worker(redis_url, bus_channel, "w1")
    w2, ctx2, cache2 = _filled_worker(redis_url, bus_channel, "w2")
    try:
        inner = ClearCache.issue(cache="c", issued_by="test")
        command = OnWorker.issue(worker_id="w2", command=inner, issued_by="test")
        [reply] = other.send_command(command, timeout=5.0)
        assert (reply.worker_id, reply.ok, reply.removed) == ("w2", True, 3)
        assert reply.op == "clear_cache" and reply.command_id == command.id
        assert len(cache2) == 0 and len(cache1) == 3  # w1 declined it
        assert (ctx1.commands_run, ctx2.commands_run) == (0, 1)
        # w1 answered "not handled", so a fleet-wide command still hears both.
        assert w1.stats.wait_for(lambda s: s["commands_handled"] == 1, WAIT)
        replies = other.send_command(_clear_all(), timeout=5.0)
        assert sorted(r.worker_id for r in replies) == ["w1", "w2"]
    finally:
        w1.close()
        w2.close()


def test_a_command_for_one_worker_does_not_wait_for_the_others(
    redis_url, bus_channel, other
):
    """A worker busy with a long command (a catalog refresh) holds no one up."""
    from caches.messages import OnWorker

    release = threading.Event()
    busy = Bus(redis_url=redis_url, channel=bus_channel, worker_id="busy")
    busy.set_command_handler(lambda command: release.wait(WAIT) and None)
    busy.start_subscriber(flush=lambda: {})
    assert busy.stats.wait_for(lambda s: s["connected"], WAIT)
    target, _, cache = _filled_worker(redis_url, bus_channel, "target")
    try:
        command = OnWorker.issue(
            worker_id="target", command=_clear_all(), issued_by="test"
        )
        started = time.monotonic()
        [reply] = other.send_command(command, timeout=30.0)
        assert reply.worker_id == "target" and len(cache) == 0
        assert time.monotonic() - started < 15.0  # not the 30 s timeout
    finally:
        release.set()
        busy.close()
        target.close()


def test_a_command_for_a_worker_that_is_gone_gets_no_answer(worker, other):
    from caches.messages import OnWorker
    from caches.operations import WorkerContext, make_command_handler

    worker.set_command_handler(make_command_handler(WorkerContext(worker_id="w1")))
    command = OnWorker.issue(worker_id="gone", command=_clear_all(), issued_by="t")
    started = time.monotonic()
    assert other.send_command(command, timeout=5.0) == []
    assert time.monotonic() - started < 2.0  # w1 said at once it is not for it
