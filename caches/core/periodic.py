"""Periodic work on the event loop: one loop helper, stoppable, that outlives a bad run.

Every timer of the worker (memory guard, consistency checks, discord.py
sweepers, the metrics logger, the metrics endpoint's heartbeat, the worker's
own jobs) runs through ``run_periodically``; ``wait_or_stop`` is its wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

#: How a periodic loop waits: ``await wait(stop, seconds)``; injectable in tests.
Waiter = Callable[[asyncio.Event, float], Awaitable[None]]


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds`` or until ``stop`` is set, whichever comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=max(seconds, 0.0))


async def run_periodically(
    job: Callable[[], object],
    *,
    every: float | Callable[[], float],
    stop: asyncio.Event,
    name: str,
    first_after: bool = False,
    wait: Waiter = wait_or_stop,
    failure_level: int = logging.ERROR,
) -> None:
    """Run ``job()`` (plain or async) every interval until ``stop`` is set.

    ``every`` is seconds, or a function returning the next delay (called after
    each run). With ``first_after`` the first run comes one delay after the
    start instead of at once. A run that raises is logged at
    ``failure_level`` (with its traceback from ERROR up) and the loop goes on.
    """
    if first_after:
        await wait(stop, _delay(every))
    while not stop.is_set():
        try:
            result = job()
            if inspect.isawaitable(result):
                await result
        except Exception as exc:  # one failed run must not end the timer
            logger.log(
                failure_level,
                "periodic %s failed: %s",
                name,
                exc,
                exc_info=failure_level >= logging.ERROR,
            )
        await wait(stop, _delay(every))


def _delay(every: float | Callable[[], float]) -> float:
    return every() if callable(every) else every
