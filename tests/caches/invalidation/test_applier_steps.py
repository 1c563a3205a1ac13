"""The applier drains what other threads deliver in bounded steps on the caches' loop.

A 10,000-row UPDATE made outside Django reaches a worker as 300 outbox rows
of 100 events: applied whole, one row a callback, the loop stalls; parsed
by the reading thread, the loop waits for the GIL. These tests hold the
loop still (a callback blocked on an event) while deliveries queue, so what
runs between two steps is known, not raced.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from caches.bus.applier import STEP_EVENTS, Applier
from caches.bus.stats import BusStats
from caches.outbox.store import StoredEvents

WAIT = 10.0


class Steps:
    """An apply that records each call's events and thread (one call = one step)."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[list[Any]] = []
        self.threads: set[int] = set()
        self.fail_on = fail_on

    def __call__(self, events: list[Any]) -> int:
        self.threads.add(threading.get_ident())
        self.calls.append(list(events))
        if self.fail_on is not None and len(self.calls) == self.fail_on:
            raise RuntimeError("this step fails")
        return 0

    @property
    def applied(self) -> list[Any]:
        return [event for call in self.calls for event in call]


class Loop:
    """An event loop on a thread of its own that a test can hold still."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def hold(self) -> threading.Event:
        """Block the loop in a callback until the returned event is set."""
        held, release = threading.Event(), threading.Event()

        def blocked() -> None:
            held.set()
            release.wait(WAIT)

        self.loop.call_soon_threadsafe(blocked)
        assert held.wait(WAIT)
        return release

    def call(self, fn: Any) -> None:
        self.loop.call_soon_threadsafe(fn)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)
        self.loop.close()


@pytest.fixture
def running() -> Iterator[Loop]:
    loop = Loop()
    yield loop
    loop.close()


def events(n: int, name: str = "user") -> list[tuple[str, str, tuple[int]]]:
    return [(name, "key", (i,)) for i in range(n)]


def applier(steps: Steps, loop: Loop | None) -> Applier:
    core = Applier(BusStats(), apply=steps)
    core.use(loop=loop.loop if loop else None)
    return core


def test_a_large_delivery_from_another_thread_is_applied_in_bounded_steps(
    running: Loop,
) -> None:
    steps = Steps()
    core = applier(steps, running)
    seen_by_probe: list[int] = []
    release = running.hold()
    core.deliver(events(1000), 0.0, measure=True, origin="elsewhere:1")
    running.call(lambda: seen_by_probe.append(len(steps.applied)))
    release.set()

    assert core.stats.wait_for(lambda s: s["applied"] == 1, WAIT)
    assert steps.applied == events(1000)  # all, once, in order
    assert max(len(call) for call in steps.calls) == STEP_EVENTS
    assert len(steps.calls) == -(-1000 // STEP_EVENTS)
    assert steps.threads == {running.thread.ident}
    # A callback queued after the delivery ran after its first step, not its last.
    assert seen_by_probe == [STEP_EVENTS]


def test_deliveries_queued_together_keep_their_order_across_steps(
    running: Loop,
) -> None:
    steps = Steps()
    core = applier(steps, running)
    release = running.hold()
    core.deliver(events(50, "user"), 0.0, measure=True)
    core.rows([(events(70, "webhook"), 0.0, "db:1"), (events(3, "llm"), 0.0, "db:2")])
    release.set()

    assert core.stats.wait_for(lambda s: s["applied"] == 3, WAIT)
    assert steps.applied == events(50, "user") + events(70, "webhook") + events(
        3, "llm"
    )
    assert max(len(call) for call in steps.calls) <= STEP_EVENTS


def test_each_delivery_is_logged_once_with_its_whole_count(
    running: Loop, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="caches.bus.applier")
    steps = Steps()
    core = applier(steps, running)
    core.deliver(events(100), 0.0, measure=True, origin="database:psql:42")

    assert core.stats.wait_for(lambda s: s["applied"] == 1, WAIT)
    lines = [
        r.getMessage() for r in caplog.records if "invalidated from" in r.getMessage()
    ]
    assert len(lines) == 1
    assert "database:psql:42" in lines[0] and "and 95 more" in lines[0]


def test_a_delivery_on_the_loops_own_thread_is_applied_at_once_whole(
    running: Loop,
) -> None:
    """This process's own commits in the worker: the next read must see them."""
    steps = Steps()
    core = applier(steps, running)
    after: list[int] = []
    done = threading.Event()

    def commit_on_loop() -> None:
        core.deliver(events(1000), 0.0, measure=False)
        after.append(len(steps.applied))
        done.set()

    running.call(commit_on_loop)
    assert done.wait(WAIT)
    assert after == [1000] and len(steps.calls) == 1


def test_without_a_loop_a_delivery_is_applied_here_at_once() -> None:
    steps = Steps()
    core = applier(steps, None)
    core.rows([(events(500), 0.0, "db:1")])
    assert steps.applied == events(500) and len(steps.calls) == 1
    assert steps.threads == {threading.get_ident()}


def test_a_failing_step_is_reported_and_the_rest_still_apply(
    running: Loop, caplog: pytest.LogCaptureFixture
) -> None:
    steps = Steps(fail_on=2)
    core = applier(steps, running)
    core.rows([(events(100), 0.0, "db:1"), (events(5, "llm"), 0.0, "db:2")])

    assert core.stats.wait_for(lambda s: s["applied"] == 2, WAIT)
    assert steps.applied == events(100) + events(5, "llm")
    assert "could not apply a batch: RuntimeError('this step fails')" in caplog.text


def test_what_waits_for_a_loop_that_is_let_go_is_applied_once(running: Loop) -> None:
    """Stopping the bus (or moving to another loop) loses nothing queued, applies nothing twice."""
    steps = Steps()
    core = applier(steps, running)
    release = running.hold()
    core.deliver(events(200), 0.0, measure=True)
    core.use(loop=None)  # the bus stops: what is queued is applied here, now
    assert steps.applied == events(200)
    release.set()  # the drain already queued on the old loop finds nothing of its own
    finished = threading.Event()
    running.call(finished.set)
    assert finished.wait(WAIT)
    assert steps.applied == events(200)
    assert core.stats.snapshot()["applied"] == 1


class WatchedRow(StoredEvents):
    """An outbox row's text that records on which thread each event was parsed."""

    def __init__(self, events: list[tuple[str, str, tuple[int]]]) -> None:
        text = json.dumps([[name, op, list(args)] for name, op, args in events])
        super().__init__(7, text)
        self.parsed_on: list[int] = []

    def stream(self) -> Iterator[Any]:
        for event in super().stream():
            self.parsed_on.append(threading.get_ident())
            yield event


def test_an_outbox_row_is_parsed_on_the_loop_as_its_events_are_taken(
    running: Loop,
) -> None:
    """The reading thread hands the JSON text over; the loop parses it step by step."""
    steps = Steps()
    core = applier(steps, running)
    row = WatchedRow(events(1000))
    seen_by_probe: list[int] = []
    release = running.hold()
    core.rows([(row, 0.0, "db:1")])
    running.call(lambda: seen_by_probe.append(len(row.parsed_on)))
    assert row.parsed_on == []  # queued, not parsed by this (the reading) thread
    release.set()

    assert core.stats.wait_for(lambda s: s["applied"] == 1, WAIT)
    assert steps.applied == events(1000)
    assert set(row.parsed_on) == {running.thread.ident}
    assert max(len(call) for call in steps.calls) == STEP_EVENTS
    # After the first step only that step's events had been parsed.
    assert seen_by_probe == [STEP_EVENTS]


@pytest.mark.parametrize(
    "text", ["not json", '[["user", "key"]]', '{"a": 1}', "[" * 5000, None]
)
def test_a_malformed_outbox_row_reads_as_no_events_and_names_its_row(
    text: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    row = StoredEvents(41, text)
    assert list(row) == [] and len(row) == 0
    assert "row 41 holds malformed events" in caplog.text


def test_a_row_malformed_halfway_yields_the_events_before_the_fault(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Invalidating more is safe: what parsed is applied, the rest is logged."""
    row = StoredEvents(
        42, '[["user", "key", [1]], ["user", "key"], ["llm", "all", []]]'
    )
    assert list(row.stream()) == [("user", "key", (1,))]
    assert "row 42 holds malformed events" in caplog.text


def test_consecutive_outbox_rows_of_one_origin_are_one_delivery_and_one_line(
    running: Loop, caplog: pytest.LogCaptureFixture
) -> None:
    """A 10,000-row UPDATE is 300 outbox rows: one log line per poll, not 300."""
    caplog.set_level(logging.INFO, logger="caches.bus.applier")
    steps = Steps()
    core = applier(steps, running)
    rows = [(events(100), 50.0 + i, "database:psql:9") for i in range(30)]
    core.rows([*rows, (events(2, "llm"), 10.0, "database:other:1")])

    # Each row counts as applied, with its own lag (30 + 1).
    assert core.stats.wait_for(lambda s: s["applied"] == 31, WAIT)
    assert steps.applied == events(100) * 30 + events(2, "llm")
    lines = [
        r.getMessage() for r in caplog.records if "invalidated from" in r.getMessage()
    ]
    assert len(lines) == 2
    assert lines[0].startswith("invalidated from database:psql:9 (30 outbox rows): ")
    assert lines[0].endswith("and 2995 more")
    assert lines[1].startswith("invalidated from database:other:1: ")
