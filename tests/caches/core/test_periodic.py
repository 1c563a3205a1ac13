"""run_periodically: runs until stopped, outlives a failed run, waits as told."""

from __future__ import annotations

import asyncio
import logging

import pytest

from caches.core.periodic import run_periodically, wait_or_stop


class Waits:
    """A waiter that records each delay and stops the loop after `runs` waits."""

    def __init__(self, stop: asyncio.Event, runs: int) -> None:
        self.stop, self.runs = stop, runs
        self.delays: list[float] = []

    async def __call__(self, stop: asyncio.Event, seconds: float) -> None:
        self.delays.append(seconds)
        if len(self.delays) >= self.runs:
            self.stop.set()


async def test_it_runs_then_waits_until_stopped() -> None:
    stop = asyncio.Event()
    wait = Waits(stop, runs=3)
    ran: list[int] = []
    await run_periodically(
        lambda: ran.append(1), every=5.0, stop=stop, name="t", wait=wait
    )
    assert ran == [1, 1, 1] and wait.delays == [5.0, 5.0, 5.0]


async def test_async_jobs_are_awaited_and_first_after_waits_first() -> None:
    stop = asyncio.Event()
    wait = Waits(stop, runs=3)
    seen: list[int] = []

    async def job() -> None:
        seen.append(len(wait.delays))

    await run_periodically(
        job, every=1.0, stop=stop, name="t", wait=wait, first_after=True
    )
    assert seen == [1, 2]


async def test_a_failed_run_is_logged_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = asyncio.Event()
    wait = Waits(stop, runs=2)
    calls: list[int] = []

    def job() -> None:
        calls.append(1)
        raise LookupError("boom")

    with caplog.at_level(logging.ERROR, logger="caches.core.periodic"):
        await run_periodically(job, every=1.0, stop=stop, name="flaky", wait=wait)
    assert len(calls) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "periodic flaky failed: boom",
        "periodic flaky failed: boom",
    ]


async def test_the_delay_may_be_computed_after_each_run() -> None:
    stop = asyncio.Event()
    wait = Waits(stop, runs=3)
    delays = iter([3.0, 2.0, 1.0])
    await run_periodically(
        lambda: None, every=lambda: next(delays), stop=stop, name="t", wait=wait
    )
    assert wait.delays == [3.0, 2.0, 1.0]


async def test_a_set_stop_runs_nothing_and_wait_or_stop_returns_at_once() -> None:
    stop = asyncio.Event()
    stop.set()
    ran: list[int] = []
    await run_periodically(lambda: ran.append(1), every=3600.0, stop=stop, name="t")
    await wait_or_stop(stop, 3600.0)
    assert ran == []
