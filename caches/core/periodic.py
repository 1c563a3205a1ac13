"""Periodic work on the event loop: wait an interval or until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

#: How a periodic loop waits: ``await wait(stop, seconds)``; injectable in tests.
Waiter = Callable[[asyncio.Event, float], Awaitable[None]]


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds`` or until ``stop`` is set, whichever comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=max(seconds, 0.0))
