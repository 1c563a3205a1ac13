"""Queued, ordered, coalescing writes of short-term memory's durable fields, kept until stored.

The cache is written first and answers at once; the table is written after,
from a background task, so a reply never waits on the database. Writes are
kept in submission order (a clear followed by a new summary lands as a delete
then an upsert) and coalesce per key: a key written five times while a batch
is in flight is written once, with its latest value. Each batch is applied in
one transaction. The drain task lingers LINGER_SECONDS on an empty queue;
a write that wakes it there is taken GATHER_SECONDS later, with the writes
queued meanwhile, so a busy bot's turns share batches (a flush never waits
for that; after a longer idle spell a new task takes the first write at
once). A failed batch is kept: its writes go back to the front of
the queue (a newer queued write of a key still wins) and are retried with
exponential back-off until the database takes them. The queue holds one
write per key; past its cap the oldest write is dropped, and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Hashable, Iterator, Sequence

from caches.database import run_db_writes
from caches.layers.short_term_memory.entry import ShortTermMemoryEntry
from caches.layers.short_term_memory.keys import USER
from caches.outage_log import on_log_trail
from tomori.domain.knobs import knobs
from tomori.domain.repositories.memory import (
    DeleteKeys,
    DeleteWhere,
    DurableMemory,
    MemoryWrite,
)

logger = logging.getLogger(__name__)

Apply = Callable[[Sequence[MemoryWrite]], None]
Call = Callable[[Apply, Sequence[MemoryWrite]], Awaitable[None]]

#: Writes per transaction. Batches run on their own database thread (see
#: `caches.database.WRITES`); kept short, each holds that thread and the GIL
#: about 0.4 ms, so the event loop never waits long on it, and 100,000 kept
#: writes still flush in about 3.5 s (20,000 measured in 0.69 s). A batch
#: after a long outage also stays well within the database call deadline.
BATCH_MAX = 100
#: The first retry of a failed batch; each further one doubles, up to
#: SHORT_TERM_MEMORY_RETRY_MAX_SECONDS.
RETRY_FIRST_SECONDS = 0.25
#: While a flush waits (shutdown), retry at least this often.
FLUSH_RETRY_SECONDS = 0.25
#: How long the drain task waits for the next write once the queue is empty
#: before it ends: a busy bot's turns wake one parked task (a future's
#: result) instead of each starting a new one (a task, its coroutine and
#: its first step: the larger part of a store's queueing).
LINGER_SECONDS = 5.0
#: How long a woken drain task waits before it takes its batch, so the writes
#: of the turns meanwhile join it: a busy bot writes one statement (a batch of
#: up to BATCH_MAX keys, each written once however many turns touched it) per
#: this much time instead of one per turn, and a turn's store then wakes
#: nothing. At 150 messages a second that is about 0.01 database round trips
#: per message (0.02 s made it 0.9: a transaction of three round trips every
#: 20 ms). What it risks is this much of the counters and summaries of a
#: worker killed without its SIGTERM (a clean stop flushes at once); the raw
#: messages of short-term memory are never stored anyway.
GATHER_SECONDS = 0.5

# (slot, write, turns it carries that the table lacks)
_Queued = tuple[Hashable, MemoryWrite, int]
#: What waits in the queue: a write, or an entry whose durable fields are
#: taken when its batch is (an upsert; converted once, however often stored).
Pending = MemoryWrite | ShortTermMemoryEntry


def retry_delay(failing: int) -> float:
    """Return the wait before the next attempt after `failing` failed ones in a row."""
    ceiling = knobs().SHORT_TERM_MEMORY_RETRY_MAX_SECONDS
    return float(min(ceiling, RETRY_FIRST_SECONDS * 2 ** min(failing - 1, 30)))


def where_matches(
    where: DeleteWhere, record: DurableMemory | ShortTermMemoryEntry
) -> bool:
    """Tell whether a bulk delete covers `record` (a row, or an entry's row)."""
    user = record.user_disc_id
    if isinstance(record, ShortTermMemoryEntry) and record.scope != USER:
        user = None  # as ShortTermMemoryEntry.durable() writes it
    return all(
        wanted is None or wanted == actual
        for wanted, actual in (
            (where.scope, record.scope),
            (where.user_disc_id, user),
            (where.server_disc_id, record.server_disc_id),
            (where.channel_disc_id, record.channel_disc_id),
        )
    )


def _materialize(write: Pending) -> MemoryWrite:
    return write.durable() if isinstance(write, ShortTermMemoryEntry) else write


def _is_upsert(write: Pending) -> bool:
    return isinstance(write, DurableMemory | ShortTermMemoryEntry)


def _slot(write: MemoryWrite) -> Hashable:
    if isinstance(write, DurableMemory):
        return write.cache_key
    if isinstance(write, DeleteKeys) and len(write.cache_keys) == 1:
        return write.cache_keys[0]
    return write


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _settled(future: asyncio.Future[None], *, within: float) -> None:
    """Wait until `future` is settled, settling it after `within` seconds at the latest."""
    timer = future.get_loop().call_later(within, _settle, future)
    try:
        await future
    finally:
        timer.cancel()


class DurableWriter:
    """An ordered write-behind queue with per-key coalescing and retries."""

    def __init__(
        self,
        apply: Apply,
        *,
        max_pending: int = 100_000,
        call: Call | None = None,
        gather: float = GATHER_SECONDS,
    ) -> None:
        self._apply = apply
        self._call: Call = call or run_db_writes
        # The read fence (see `reading`): the reads open by how many batches
        # had been stored (`batches`) when each began, and the writes of
        # batches stored while a read was open, by their number.
        self._reads: Counter[int] = Counter()
        self._recent: deque[tuple[int, list[Pending]]] = deque()
        self.max_pending = max_pending
        self.gather = gather
        # Set while a woken drain task gathers writes (see _gather).
        self._gathering: asyncio.Future[None] | None = None
        self._pending: dict[Hashable, Pending] = {}
        self._turns: dict[Hashable, int] = {}
        self._in_flight: list[_Queued] = []
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        # Set while the drain task lingers on an empty queue (see _linger).
        self._idle: asyncio.Future[None] | None = None
        self._hurry = False
        self._failing = 0  # consecutive failed attempts
        self.batches = 0
        self.writes = 0
        self.failures = 0
        self.dropped = 0

    def pending_count(self) -> int:
        """Return how many writes wait (queued or in the running batch)."""
        return len(self._pending) + len(self._in_flight)

    def turns_behind(self) -> int:
        """Return the turns the waiting writes carry that the table lacks (summed per key)."""
        return sum(self._turns.values()) + sum(n for _, _, n in self._in_flight)

    def submit(self, write: MemoryWrite, *, turns: int = 0) -> None:
        """Queue `write` after every earlier one, replacing a queued write of its key.

        `turns` is how many turns the write adds to its key (a stored turn: 1).
        """
        slot = _slot(write)
        self._pending.pop(slot, None)  # re-inserting moves it to the end
        carried = self._turns.pop(slot, 0)
        if isinstance(write, DeleteWhere):
            self._drop_pending_upserts(write)
        self._pending[slot] = write
        if isinstance(write, DurableMemory) and carried + turns:
            self._turns[slot] = carried + turns
        self._enforce_cap()
        self._start()

    def submit_entry(self, entry: ShortTermMemoryEntry, *, turns: int = 0) -> None:
        """Queue the upsert of `entry`'s durable fields, like `submit(entry.durable())`.

        The fields are taken when the write's batch is (an entry is
        immutable), so a key stored many times while a batch runs converts once.
        """
        self.submit_entries((entry,), turns=turns)

    def submit_entries(
        self, entries: Sequence[ShortTermMemoryEntry], *, turns: int = 0
    ) -> None:
        """Queue `entries` in order, each like `submit_entry` (one store's keys)."""
        pending = self._pending
        for entry in entries:
            slot = entry.key
            if slot in pending:
                del pending[slot]  # re-inserting moves it to the end
            pending[slot] = entry
        if turns:
            counts = self._turns
            for entry in entries:
                slot = entry.key
                counts[slot] = counts.get(slot, 0) + turns
        if len(pending) > self.max_pending:
            self._enforce_cap()
        self._start()

    def _drop_pending_upserts(self, where: DeleteWhere) -> None:
        for slot, queued in list(self._pending.items()):
            if _is_upsert(queued) and where_matches(where, queued):  # type: ignore[arg-type]
                del self._pending[slot]
                self._turns.pop(slot, None)

    def _enforce_cap(self) -> None:
        while len(self._pending) > self.max_pending:
            slot = next(iter(self._pending))
            del self._pending[slot]
            self._turns.pop(slot, None)
            self.dropped += 1
            if on_log_trail(self.dropped):
                logger.error(
                    "short-term memory: over %d durable writes waiting for the "
                    "database; dropped the oldest (%d dropped so far)",
                    self.max_pending,
                    self.dropped,
                )

    def _start(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # Sync caller (a script, the shell): nothing to overlap with.
            self._apply_now()
            return
        idle = self._idle
        if idle is not None and idle.get_loop() is loop:
            if not idle.done():
                idle.set_result(None)  # the parked drain task takes it
            return
        task = self._task
        if task is None or task.done() or task.get_loop() is not loop:
            self._task = loop.create_task(self._drain(), name="stm-durable-writes")

    def _take_batch(self) -> list[_Queued]:
        slots = list(itertools.islice(self._pending, BATCH_MAX))
        pending, turns = self._pending, self._turns
        batch = [(s, _materialize(pending.pop(s)), turns.pop(s, 0)) for s in slots]
        self._in_flight = batch
        return batch

    def _requeue(self, batch: list[_Queued]) -> None:
        """Put a failed batch back in front of the queue; newer writes of a key win."""
        kept: dict[Hashable, Pending] = {}
        for slot, write, turns in batch:
            newer = self._pending.get(slot)
            if newer is None:
                kept[slot] = write
            if turns and _is_upsert(newer or write):
                self._turns[slot] = self._turns.get(slot, 0) + turns
        kept.update(self._pending)
        self._pending = kept
        self._in_flight = []
        self._enforce_cap()

    def _apply_now(self) -> None:
        while self._pending:
            batch = self._take_batch()
            try:
                self._apply([write for _, write, _ in batch])
            except Exception as error:
                self._requeue(batch)
                self._failed(len(batch), error)
                return  # kept: the next write tries again
            self._succeeded(batch)

    async def _drain(self) -> None:
        self._wake = asyncio.Event()
        while True:
            while self._pending:
                batch = self._take_batch()
                try:
                    await self._call(self._apply, [write for _, write, _ in batch])
                except asyncio.CancelledError:
                    self._requeue(batch)
                    raise
                except Exception as error:
                    self._requeue(batch)
                    self._failed(len(batch), error)
                    await self._back_off()
                    continue
                self._succeeded(batch)
            if self._hurry or not await self._linger():
                return
            await self._gather()

    async def _gather(self) -> None:
        """Wait `gather` seconds (a flush cuts it short) for more writes to join the batch."""
        if self._hurry or self.gather <= 0:
            return
        gathering = self._gathering = asyncio.get_running_loop().create_future()
        try:
            await _settled(gathering, within=self.gather)
        finally:
            self._gathering = None

    async def _linger(self) -> bool:
        """Park until a write is queued or LINGER_SECONDS pass; tell whether one was."""
        self._idle = asyncio.get_running_loop().create_future()
        try:
            await _settled(self._idle, within=LINGER_SECONDS)
        finally:
            self._idle = None
        return bool(self._pending)

    def _succeeded(self, batch: list[_Queued]) -> None:
        self._in_flight = []
        self.batches += 1
        if self._reads:  # a read still open may have missed this batch
            self._recent.append((self.batches, [write for _, write, _ in batch]))
        self.writes += len(batch)
        if self._failing:
            logger.warning(
                "short-term memory: the table took the kept durable writes after "
                "%d failed attempts (%d still waiting)",
                self._failing,
                len(self._pending),
            )
        self._failing = 0

    def _failed(self, count: int, error: Exception) -> None:
        self.failures += 1
        self._failing += 1
        if on_log_trail(self._failing):
            # Only the type: the message may quote SQL with summaries in it.
            logger.warning(
                "short-term memory: kept %d durable writes after a failed batch "
                "(%s, attempt %d); retrying",
                count,
                type(error).__name__,
                self._failing,
            )

    async def _back_off(self) -> None:
        delay = retry_delay(self._failing)
        if self._hurry:
            delay = min(delay, FLUSH_RETRY_SECONDS)
        wake = self._wake
        assert wake is not None
        wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), delay)

    async def flush(self) -> None:
        """Wait until every queued write is stored, retrying failed ones (bound it by a timeout)."""
        loop = asyncio.get_running_loop()
        self._hurry = True
        try:
            while True:
                task = self._task
                if task is not None and task.get_loop() is not loop:
                    task = None  # left behind by a loop that is gone
                if (task is None or task.done()) and self._pending:
                    self._start()
                    task = self._task
                if task is None or task.done():
                    return
                if self._wake is not None:
                    self._wake.set()  # cut a long back-off short
                if self._idle is not None:
                    _settle(self._idle)  # a lingering task ends (it sees _hurry)
                if self._gathering is not None:
                    _settle(self._gathering)  # a gathering task takes its batch now
                await asyncio.shield(task)
        finally:
            self._hurry = False

    def queued_keys(self) -> list[str]:
        """Return the keys of the upserts stored during open reads, in flight or queued.

        What a table read inside `reading` may not have seen of them (for
        `overlay`'s reason): call it inside the same block.
        """
        writes: list[Pending] = [w for _, stored in self._recent for w in stored]
        writes += [write for _, write, _ in self._in_flight]
        writes += self._pending.values()
        return [
            write.key if isinstance(write, ShortTermMemoryEntry) else write.cache_key
            for write in writes
            if isinstance(write, ShortTermMemoryEntry | DurableMemory)
        ]

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Fence a table read whose result `overlay` adjusts: overlay inside the block.

        Batches are stored from their own database thread, so a read can see
        the table from before a batch that was stored (and left the in-flight
        list) by the time the read returns. Such batches are kept for
        `overlay` until no read that began before them is open: bounded by
        the batches stored during the longest open read (a read has a
        deadline, DB_CALL_TIMEOUT_SECONDS).
        """
        began = self.batches
        self._reads[began] += 1
        try:
            yield
        finally:
            self._reads[began] -= 1
            if not self._reads[began]:
                del self._reads[began]
            oldest = min(self._reads, default=None)
            recent = self._recent
            while recent and (oldest is None or recent[0][0] <= oldest):
                recent.popleft()  # stored before every open read began

    def overlay_many(
        self, records: dict[str, DurableMemory | None]
    ) -> dict[str, DurableMemory | None]:
        """Return `records` (read from the table) as `overlay` would leave each, in one pass.

        One walk of the queued writes for every key, where `overlay` per key
        would walk them once a key (a batch of 500 keys over a queue grown
        during an outage would hold the loop for seconds).
        """
        result = dict(records)
        in_flight: list[Pending] = [write for _, write, _ in self._in_flight]
        stored: list[Pending] = [w for _, writes in self._recent for w in writes]
        for queued in (*stored, *in_flight, *self._pending.values()):
            if isinstance(queued, ShortTermMemoryEntry):
                if queued.key in result:
                    result[queued.key] = queued.durable()
            elif isinstance(queued, DurableMemory):
                if queued.cache_key in result:
                    result[queued.cache_key] = queued
            elif isinstance(queued, DeleteKeys):
                for key in queued.cache_keys:
                    if key in result:
                        result[key] = None
            else:
                for key, record in result.items():
                    if record is not None and where_matches(queued, record):
                        result[key] = None
        return result

    def overlay(self, key: str, record: DurableMemory | None) -> DurableMemory | None:
        """Return `record` (read from the table) as the queued writes will leave it.

        Writes are replayed in order: those stored while a read was open
        (inside `reading`, which a read that overlays must use), then the
        batch in flight, then the queue. Replaying a write the read saw
        already leaves the record as it was.
        """
        return self.overlay_many({key: record})[key]
