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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

#: Runs one message's turn; the float is when the message arrived (perf_counter).
Run = Callable[[Any, float], Awaitable[None]]


class Intake:
    """Bound the turns in flight; queue the rest in arrival order, shedding the oldest."""

    def __init__(
        self,
        run: Run,
        shed: Callable[[Any], None],
        *,
        workers: int,
        max_waiting: int,
    ) -> None:
        if workers < 1 or max_waiting < 1:
            raise ValueError("an intake needs at least one worker and one slot")
        self._run = run
        self._shed = shed
        self.workers = workers
        self.max_waiting = max_waiting
        self.active = 0  # event tasks running turns (each a worker)
        self._waiting: deque[tuple[Any, float]] = deque()

    @property
    def waiting(self) -> int:
        """Return how many messages wait for a worker."""
        return len(self._waiting)

    async def take(self, message: Any) -> None:
        """Run `message`'s turn in this task if a worker slot is free, else queue it.

        Returns once this task's turns are done (at once when it queued).
        """
        arrived = perf_counter()
        if self.active >= self.workers:
            waiting = self._waiting
            if len(waiting) >= self.max_waiting:
                self._shed(waiting.popleft()[0])
            waiting.append((message, arrived))
            return
        self.active += 1
        try:
            await self._run(message, arrived)
            waiting = self._waiting
            while waiting:
                queued, queued_at = waiting.popleft()
                await self._run(queued, queued_at)
        finally:
            self.active -= 1
