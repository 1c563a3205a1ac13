"""Turns stored on user keys the worker does not hold, without waiting for their rows.

A turn in a server writes two keys: the channel's (server) conversation,
which a worker nearly always holds, and the author's own (user) copy. Under
a full cache the user key of a returning author has often been evicted, and
storing a turn on it needs its row first (the turn count, summary and
categories carry on): ten minutes into a production run that read was one
database round trip for about every third message, and more the longer the
run. A turn that does not answer needs nothing from that row, so it does not
wait for it: its store on the user key is deferred here, and every
GATHER_SECONDS the deferred keys are read in one query and their turns
applied in order, over the row, as the turns would have applied them.

What keeps that coherent (the store enforces it):
- every other read or write of a deferred key settles it first (a turn that
  answers, a listing, a summary update, `get`), so nothing sees the key
  without its deferred turns, and they are applied before any later turn;
- a delete drops the deferred turns of the keys it deletes (it would have
  deleted what they stored); a cache clear keeps them: they are writes;
- a failed read keeps them and retries with the durable writer's back-off;
- bounded: past `max_turns` the oldest key's turns are dropped, and logged;
- a shutdown settles them before the durable writes' last flush.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import NamedTuple

from caches.layers.short_term_memory.durable import (
    FLUSH_RETRY_SECONDS,
    retry_delay,
)
from caches.layers.short_term_memory.entry import StmMessage
from caches.outage_log import on_log_trail
from tomori.domain.knobs import knobs
from tomori.domain.repositories.memory import DurableMemory

logger = logging.getLogger(__name__)

#: How long a deferred turn waits for the turns after it to share its read:
#: at 150 messages a second, about 20 deferred keys a query. What it risks:
#: this much more of a killed worker's (not a stopped one's) turn counts.
GATHER_SECONDS = 0.25
#: Keys read per query.
BATCH_MAX = 500


class Identity(NamedTuple):
    """What a fresh entry of a deferred user key is built from (nothing stored)."""

    channel_disc_id: int
    user_disc_id: int
    server_disc_id: int
    persona_id: int | None


class DeferredTurn(NamedTuple):
    """One turn to store on a user key: what `with_turn` takes besides the base."""

    messages: tuple[StmMessage, ...]
    at: datetime
    persona_lineage: tuple[int, ...]
    channel_name: str | None
    server_name: str | None
    parent_channel_disc_id: int | None


class Deferred(NamedTuple):
    """A deferred key's turns, oldest first."""

    identity: Identity
    turns: list[DeferredTurn]


#: Read the rows of keys, overlaid with the queued durable writes (None: no row).
Load = Callable[[list[str]], Awaitable[dict[str, DurableMemory | None]]]
#: Store a key's deferred turns over its row (no await); the bool: a reader
#: waits for them (cache the entry), else the background drain does.
Apply = Callable[[str, DurableMemory | None, Deferred, bool], None]


class DeferredTurns:
    """User-key turns waiting for one shared read of their rows."""

    def __init__(
        self,
        load: Load,
        apply: Apply,
        *,
        gather: float = GATHER_SECONDS,
        max_turns: int | None = None,
    ) -> None:
        self._load = load
        self._apply = apply
        self.gather = gather
        self.max_turns = max_turns
        self._keys: dict[str, Deferred] = {}
        self._count = 0
        self._round: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing = 0
        self._drops = 0  # drop events (the log's trail; `dropped` counts turns)
        self.loads = 0
        self.applied = 0
        self.dropped = 0
        self.failures = 0

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        """Return how many keys have deferred turns."""
        return len(self._keys)

    @property
    def turns(self) -> int:
        """Return how many turns are deferred."""
        return self._count

    def defer(self, key: str, identity: Identity, turn: DeferredTurn) -> None:
        """Store `turn` on `key` once its row is read (with the other keys deferred)."""
        deferred = self._keys.get(key)
        if deferred is None:
            self._keys[key] = Deferred(identity, [turn])
        else:
            deferred.turns.append(turn)
        self._count += 1
        cap = self.max_turns
        if cap is None:
            cap = knobs().SHORT_TERM_MEMORY_PENDING_WRITES_MAX
        while self._count > cap:
            self._drop_oldest()
        self._start()

    def _drop_oldest(self) -> None:
        key = next(iter(self._keys))
        dropped = len(self._keys.pop(key).turns)
        self._count -= dropped
        self.dropped += dropped
        self._drops += 1
        if on_log_trail(self._drops):
            logger.error(
                "short-term memory: over %d turns waiting for their user keys' "
                "rows; dropped the oldest key's (%d turns dropped so far)",
                self.max_turns or knobs().SHORT_TERM_MEMORY_PENDING_WRITES_MAX,
                self.dropped,
            )

    def drop_where(self, predicate: Callable[[str], bool]) -> int:
        """Forget the deferred turns of every key matching `predicate` (a delete); return how many."""
        dropped = 0
        for key in [key for key in self._keys if predicate(key)]:
            dropped += len(self._keys.pop(key).turns)
        self._count -= dropped
        return dropped

    # ------------------------------------------------------------ settling

    async def settle(self, keys: Callable[[str], bool] | None = None) -> None:
        """Return once no deferred key matches `keys` (None: none is deferred).

        Reads their rows and applies their turns now (or joins the read
        running). Database errors propagate; the turns stay deferred.
        """
        while self._keys and (keys is None or any(keys(key) for key in self._keys)):
            await self._one_round(reader=True)

    async def settle_key(self, key: str) -> None:
        """Return once `key` has no deferred turns (see `settle`)."""
        while key in self._keys:
            await self._one_round(reader=True)

    async def flush(self) -> None:
        """Apply every deferred turn, retrying failed reads (bound it by a timeout)."""
        while self._keys:
            try:
                await self._one_round()
            except Exception:  # noqa: BLE001 (kept and counted: retry)
                await asyncio.sleep(FLUSH_RETRY_SECONDS)

    async def _one_round(self, *, reader: bool = False) -> None:
        """Read the oldest deferred keys' rows and apply their turns (one at a time)."""
        running, loop = self._round, asyncio.get_running_loop()
        if running is None or running.done() or running.get_loop() is not loop:
            running = self._round = loop.create_task(
                self._read_and_apply(reader), name="stm-deferred-turns"
            )
            running.add_done_callback(_retrieved)
        await asyncio.shield(running)

    async def _read_and_apply(self, reader: bool) -> None:
        keys = list(itertools.islice(self._keys, BATCH_MAX))
        if not keys:
            return
        self.loads += 1
        try:
            records = await self._load(keys)
        except Exception as error:
            self._failed(len(keys), error)
            raise
        # No await from here: every turn deferred during the read is applied
        # over the row as the read (overlaid with the queued writes) left it.
        if self._failing:
            logger.warning(
                "short-term memory: read the deferred user keys after %d failed "
                "attempts (%d turns waiting)",
                self._failing,
                self._count,
            )
            self._failing = 0
        for key in keys:
            deferred = self._keys.pop(key, None)
            if deferred is None:
                continue  # deleted meanwhile
            self._count -= len(deferred.turns)
            self.applied += len(deferred.turns)
            self._apply(key, records.get(key), deferred, reader)

    def _failed(self, count: int, error: Exception) -> None:
        self.failures += 1
        self._failing += 1
        if on_log_trail(self._failing):
            logger.warning(
                "short-term memory: reading %d deferred user keys failed (%s, "
                "attempt %d); their turns are kept and retried",
                count,
                type(error).__name__,
                self._failing,
            )

    # ------------------------------------------------------------ background

    def _start(self) -> None:
        task = self._task
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a script): a later settle or flush applies them
        if task is None or task.done() or task.get_loop() is not loop:
            self._task = loop.create_task(self._drain(), name="stm-deferred-drain")

    async def _drain(self) -> None:
        """Every `gather` seconds, apply what is deferred; back off while reads fail."""
        while self._keys:
            await asyncio.sleep(self._delay())
            with contextlib.suppress(Exception):  # counted and logged in the round
                await self._one_round()

    def _delay(self) -> float:
        return retry_delay(self._failing) if self._failing else self.gather

    def stats(self) -> dict[str, int]:
        """Return the deferred turns now and what was done with them so far."""
        return {
            "deferred_turns": self._count,
            "deferred_keys": len(self._keys),
            "deferred_reads": self.loads,
            "deferred_turns_applied": self.applied,
            "deferred_turns_dropped": self.dropped,
            "deferred_read_failures": self.failures,
        }


def _retrieved(task: asyncio.Task[None]) -> None:
    """Mark a round's error seen (logged by the round; its waiters, if any, get it too)."""
    if not task.cancelled():
        task.exception()
