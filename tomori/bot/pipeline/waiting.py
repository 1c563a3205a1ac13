"""Let callers await a running count (tests, the demo, benchmarks) instead of sleeping."""

from __future__ import annotations

import asyncio


class CountWaiters:
    """Futures released once a monotonically growing count reaches their target."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []

    def notify(self, count: int) -> None:
        """Release every waiter whose target `count` has reached."""
        if not self._waiting:
            return  # the hot path: nobody waits
        still = []
        for target, future in self._waiting:
            if future.done():
                continue
            if count >= target:
                future.set_result(None)
            else:
                still.append((target, future))
        self._waiting = still

    async def wait(self, count: int, target: int, timeout: float | None) -> None:
        """Return once the count (now `count`) reaches `target`; TimeoutError after `timeout`."""
        if count >= target:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((target, future))
        await asyncio.wait_for(future, timeout)
