"""The pipeline's intake: at most `workers` turns at once, the rest wait in one queue.

discord.py runs every event in a task of its own, so before this a burst (a
cold start, a slow database, a gateway replay) kept one suspended turn per
message: its task, the coroutine frames down to the cache layer that waits,
its notes. Measured with the database held and 3,000 messages in flight
(`benchmarks/pipeline_burst.py`), that is about 12 KB per message traced,
and the RSS a burst raises stays raised (the freed blocks are scattered
over the heap). Now a message that finds every worker busy waits as a queue
slot: its event task ends at once, and the message itself (which
discord.py's message cache holds anyway) is all that stays.

No task is added: the event task that finds a free worker slot runs the
turn itself, then serves the queue until it is empty, so a quiet worker's
turn costs what it did. A message that would make more than `max_waiting`
wait sheds the oldest waiting one: counted (`shed`), logged, and kept in the
history window like a skipped message, since answering a message that old
helps nobody and the queue must stay bounded (a 512 MB container).

At shutdown `close()` stops it at once: no turn starts after, the waiting
messages are dropped (they wrote nothing) and later ones are refused, both
handed to `drop`; `stop()` then lets the running turns finish until a
deadline and cancels the rest. A turn's short-term memory store has no
await inside, so a cancelled turn stored all of its turn or nothing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any

#: Runs one message's turn; the float is when the message arrived (perf_counter).
Run = Callable[[Any, float], Awaitable[None]]
#: How long cancelled turns are given to unwind (each ends at its next await).
CANCEL_WAIT_SECONDS = 1.0


@dataclass(frozen=True)
class Stopped:
    """How the turns running when the intake closed ended."""

    finished: int
    cancelled: int
    seconds: float  # from close() to the last of them


class Intake:
    """Bound the turns in flight; queue the rest in arrival order, shedding the oldest."""

    def __init__(
        self,
        run: Run,
        shed: Callable[[Any], None],
        *,
        workers: int,
        max_waiting: int,
        drop: Callable[[Any], None] | None = None,
    ) -> None:
        if workers < 1 or max_waiting < 1:
            raise ValueError("an intake needs at least one worker and one slot")
        self._run = run
        self._shed = shed
        self._drop = drop or shed
        self.workers = workers
        self.max_waiting = max_waiting
        self.closed = False
        self._waiting: deque[tuple[Any, float]] = deque()
        self._workers: set[asyncio.Task[Any]] = set()  # event tasks running turns
        self._at_close: set[asyncio.Task[Any]] = set()  # those running at close()
        self._closed_at = 0.0

    @property
    def active(self) -> int:
        """Return how many turns run now (each in its own event task: a worker)."""
        return len(self._workers)

    @property
    def waiting(self) -> int:
        """Return how many messages wait for a worker."""
        return len(self._waiting)

    async def take(self, message: Any) -> None:
        """Run `message`'s turn in this task if a worker slot is free, else queue it.

        Returns once this task's turns are done (at once when it queued).
        """
        arrived = perf_counter()
        if self.closed:
            self._drop(message)
            return
        if self.active >= self.workers:
            waiting = self._waiting
            if len(waiting) >= self.max_waiting:
                self._shed(waiting.popleft()[0])
            waiting.append((message, arrived))
            return
        task = asyncio.current_task()
        assert task is not None  # a coroutine runs in a task
        self._workers.add(task)
        try:
            await self._run(message, arrived)
            waiting = self._waiting
            while waiting:
                queued, queued_at = waiting.popleft()
                await self._run(queued, queued_at)
        finally:
            self._workers.discard(task)

    def close(self) -> int:
        """Start no turn from now on: drop the waiting messages; return how many."""
        if not self.closed:
            self._at_close = set(self._workers)
            self._closed_at = perf_counter()
        self.closed = True
        waiting = list(self._waiting)
        self._waiting.clear()  # in place: the workers' loops see it empty
        for message, _ in waiting:
            self._drop(message)
        return len(waiting)

    async def stop(self, within: float) -> Stopped:
        """Close; wait `within` s for the turns running at close, then cancel those left."""
        self.close()
        running = self._at_close
        pending: set[asyncio.Task[Any]] = set()
        if running:
            _, pending = await asyncio.wait(running, timeout=within)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=CANCEL_WAIT_SECONDS)
        return Stopped(
            finished=len(running) - len(pending),
            cancelled=len(pending),
            seconds=perf_counter() - self._closed_at,
        )
