"""ShortTermMemoryStore: the cache, its durable write queue and hydration, as one unit.

The registry sees the store as a cache (it satisfies `ManagedCache`), so a
registry clear also forgets which scopes were hydrated and stales in-flight
loads. Clearing the cache never touches the table: only the explicit
`clear_short_term_memory_*` operations delete durable rows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

from caches.core import MISSING, BoundedTTLCache, Clock
from caches.layers.short_term_memory import keys as k
from caches.layers.short_term_memory.durable import DurableWriter
from caches.layers.short_term_memory.entry import ShortTermMemoryEntry, StmMessage
from caches.layers.short_term_memory.hydration import (
    Hydrator,
    Scope,
    crude_ttl,
    summary_ttl,
)
from tomori.knobs import knobs
from tomori.repositories import memory as repo
from tomori.repositories.memory import DeleteKeys, DeleteWhere

Value = ShortTermMemoryEntry | None


class ScopeFilters(TypedDict, total=False):
    """What a listing of one user's or server's entries leaves out (see list_scope)."""

    exclude_channel_disc_id: int | None
    persona_lineage: Collection[int] | None
    limit: int | None


# The listing index may hold this many dead keys before it is rebuilt.
_INDEX_SLACK = 1024


@dataclass(frozen=True, slots=True)
class _Where:
    """The ids a write names: a channel, and the user and/or server scope."""

    channel_disc_id: int
    user_disc_id: int | None
    server_disc_id: int | None
    persona_id: int | None

    def targets(self) -> list[tuple[str, str]]:
        """Return (scope, key): the user key if a user, the server key if a guild."""
        channel, persona = self.channel_disc_id, self.persona_id
        targets = []
        if self.user_disc_id is not None:
            key = k.user_short_term_memory_key(self.user_disc_id, channel, persona)
            targets.append((k.USER, key))
        if self.server_disc_id is not None:
            key = k.server_short_term_memory_key(self.server_disc_id, channel, persona)
            targets.append((k.SERVER, key))
        return targets

    def fresh_entry(self, scope: str, key: str, now: datetime) -> ShortTermMemoryEntry:
        """Return an empty entry for `key`."""
        return ShortTermMemoryEntry(
            key=key,
            scope=scope,
            channel_disc_id=self.channel_disc_id,
            last_updated=now,
            user_disc_id=self.user_disc_id if scope == k.USER else None,
            server_disc_id=self.server_disc_id,
            persona_id=self.persona_id,
            persona_lineage=() if self.persona_id is None else (self.persona_id,),
        )


class ShortTermMemoryStore:
    """Short-term memory of one process: cache first, table behind."""

    def __init__(self, *, maxsize: int) -> None:
        self.cache: BoundedTTLCache[str, Value] = BoundedTTLCache(
            "short_term_memory", maxsize=maxsize
        )
        # Scopes (user or server) already bulk-loaded; they expire with the
        # crude ttl so entries evicted at the cap come back on a later listing.
        self._loaded: BoundedTTLCache[Scope, bool] = BoundedTTLCache(
            "short_term_memory_scopes", maxsize=maxsize, ttl=crude_ttl()
        )
        self.writer = DurableWriter(
            repo.apply_memory_writes,
            max_pending=knobs().SHORT_TERM_MEMORY_PENDING_WRITES_MAX,
        )
        self.hydrator = Hydrator(self.cache, self.writer, self._put)
        self._index: dict[Scope, set[str]] = {}
        self._index_size = 0

    @property
    def wall_clock(self) -> Callable[[], datetime]:
        """Return the clock stored timestamps come from (tests replace it)."""
        return self.hydrator.wall_clock

    @wall_clock.setter
    def wall_clock(self, clock: Callable[[], datetime]) -> None:
        self.hydrator.wall_clock = clock

    # ------------------------------------------------------------ writes

    def _put(self, entry: ShortTermMemoryEntry, ttl: float | None = None) -> None:
        if ttl is None:
            ttl = summary_ttl() if entry.has_summary else crude_ttl()
        self.cache.set(entry.key, entry, ttl)
        owner = entry.owner
        if owner is not None:
            keys = self._index.setdefault((entry.scope, owner), set())
            if entry.key not in keys:
                keys.add(entry.key)
                self._index_size += 1
                self._rebuild_index_if_bloated()

    def _write(self, entry: ShortTermMemoryEntry, *, turns: int = 0) -> None:
        """Cache `entry` (a live write wins over any hydration) and queue its row."""
        self.hydrator.touch(entry.key)
        self._put(entry)
        self.writer.submit(entry.durable(), turns=turns)

    def _current(self, key: str) -> ShortTermMemoryEntry | None:
        value = self.cache.peek(key)
        return value if isinstance(value, ShortTermMemoryEntry) else None

    async def store(
        self,
        *,
        user_disc_id: int,
        channel_disc_id: int,
        messages: Sequence[StmMessage],
        server_disc_id: int | None = None,
        persona_id: int | None = None,
        persona_lineage: Sequence[int] = (),
        channel_name: str | None = None,
        server_name: str | None = None,
        parent_channel_disc_id: int | None = None,
        categories: Sequence[str] | None = None,
    ) -> ShortTermMemoryEntry:
        """Store a channel's latest messages; keep its summary, count the turn.

        Writes the user-scoped key always and the server-shared key when
        `server_disc_id` is given (None means a DM). Returns the user entry.
        """
        where = _Where(channel_disc_id, user_disc_id, server_disc_id, persona_id)
        bases = await self._bases(where)
        # No await from here on: read-merge-write of both keys is atomic.
        limit = knobs().SHORT_TERM_MEMORY_MAX_MESSAGES_PER_CHANNEL
        written = [
            base.evolve(
                persona_lineage=tuple(persona_lineage) or base.persona_lineage,
                channel_name=channel_name or base.channel_name,
                server_name=server_name or base.server_name,
                parent_channel_disc_id=(
                    parent_channel_disc_id or base.parent_channel_disc_id
                ),
                messages=tuple(messages)[-limit:],
                categories=base.categories if categories is None else tuple(categories),
                turn_count=base.turn_count + 1,
                last_updated=self.wall_clock(),
            )
            for base in bases
        ]
        for entry in written:
            self._write(entry, turns=1)
        return written[0]

    async def update_summary(
        self,
        *,
        channel_disc_id: int,
        summary: str,
        user_disc_id: int | None = None,
        server_disc_id: int | None = None,
        persona_id: int | None = None,
        categories: Sequence[str] | None = None,
    ) -> list[ShortTermMemoryEntry]:
        """Set the summary (truncated) of the user and/or server key of a channel."""
        where = _Where(channel_disc_id, user_disc_id, server_disc_id, persona_id)
        bases = await self._bases(where)
        text = summary[: knobs().SHORT_TERM_MEMORY_MAX_SUMMARY_LENGTH] or None
        written = [
            base.evolve(
                summary=text,
                summarized_turn_count=base.turn_count,
                categories=base.categories if categories is None else tuple(categories),
                last_updated=self.wall_clock(),
            )
            for base in bases
        ]
        for entry in written:
            self._write(entry)
        return written

    async def _bases(self, where: _Where) -> list[ShortTermMemoryEntry]:
        """Return the current (hydrated) or a fresh entry for each key of `where`."""
        targets = where.targets()
        for _, key in targets:
            await self.hydrator.ensure_key(key)
        now = self.wall_clock()
        return [
            self._current(key) or where.fresh_entry(scope, key, now)
            for scope, key in targets
        ]

    # ------------------------------------------------------------ reads

    async def get(self, key: str) -> ShortTermMemoryEntry | None:
        """Return the entry of `key`, hydrating its durable fields on a miss."""
        return await self.hydrator.ensure_key(key)

    async def list_scope(
        self,
        scope: str,
        owner: int,
        *,
        exclude_channel_disc_id: int | None = None,
        persona_lineage: Collection[int] | None = None,
        limit: int | None = None,
    ) -> list[ShortTermMemoryEntry]:
        """Return a user's or server's non-empty entries, newest first."""
        await self.hydrator.ensure_scope(scope, owner, self._loaded)
        entries = [
            entry
            for entry in self._live_entries((scope, owner))
            if entry.channel_disc_id != exclude_channel_disc_id
            and entry.matches_lineage(persona_lineage)
            and (entry.messages or entry.summary)
        ]
        entries.sort(key=ShortTermMemoryEntry.sort_key, reverse=True)
        return entries if limit is None else entries[:limit]

    def _live_entries(self, scope: Scope) -> list[ShortTermMemoryEntry]:
        keys = self._index.get(scope, set())
        live = []
        for key in list(keys):
            value = self.cache.peek(key)
            if isinstance(value, ShortTermMemoryEntry) and value.owner == scope[1]:
                live.append(value)
            elif value is MISSING:
                keys.discard(key)
                self._index_size -= 1
        return live

    # ------------------------------------------------------------ clears

    def delete_where(self, predicate: Callable[[str], bool], where: DeleteWhere) -> int:
        """Drop matching keys from the cache and their rows; return entries dropped."""
        self.hydrator.touch_where(predicate)
        # Count memories only, not the cached "nothing stored" markers.
        removed = sum(
            1
            for key, value in self.cache.items()
            if value is not None and predicate(key)
        )
        self.cache.invalidate_where(predicate)
        self.writer.submit(where)
        return removed

    def delete_key(self, key: str) -> int:
        """Drop one key from the cache and its row; return 1 if it held a memory."""
        self.hydrator.touch(key)
        removed = 1 if self._current(key) is not None else 0
        self.cache.invalidate(key)
        self.writer.submit(DeleteKeys((key,)))
        return removed

    def clear_expired(self) -> int:
        """Drop every expired entry now (the emergency clear's sweeper)."""
        self._loaded.clear_expired()
        removed = self.cache.clear_expired()
        self._rebuild_index_if_bloated()
        return removed

    def _rebuild_index_if_bloated(self) -> None:
        # Entries expire and get evicted without telling the index; rebuild
        # it before dead keys outnumber live ones, so it stays bounded.
        if self._index_size <= 2 * len(self.cache) + _INDEX_SLACK:
            return
        self._index = {}
        self._index_size = 0
        for key, value in self.cache.items():
            if isinstance(value, ShortTermMemoryEntry) and value.owner is not None:
                self._index.setdefault((value.scope, value.owner), set()).add(key)
                self._index_size += 1

    def memory_totals(self) -> tuple[int, int]:
        """Return (entries, turns) the cache holds (what the table should match)."""
        entries = [
            value
            for _, value in self.cache.items()
            if isinstance(value, ShortTermMemoryEntry)
        ]
        return len(entries), sum(entry.turn_count for entry in entries)

    # ------------------------------------------------------------ ManagedCache

    def __len__(self) -> int:
        return len(self.cache)

    def clear(self) -> int:
        """Drop every cached entry (the table keeps its rows)."""
        self.hydrator.touch_all()
        self._loaded.clear()
        self._index = {}
        self._index_size = 0
        return self.cache.clear()

    def invalidate(self, key: Any) -> int:
        """Drop one cached entry (the table keeps its row)."""
        self.hydrator.touch(key)
        return self.cache.invalidate(key)

    def set_clock(self, clock: Clock) -> None:
        """Read ttl time from `clock`."""
        self.cache.set_clock(clock)
        self._loaded.set_clock(clock)

    def stats(self) -> dict[str, Any]:
        """Return the cache's stats plus the durable queue and hydration counters."""
        return {
            **self.cache.stats(),
            "ttl": crude_ttl(),
            "summary_ttl": summary_ttl(),
            "pending_writes": self.writer.pending_count(),
            "durable_batches": self.writer.batches,
            "durable_write_failures": self.writer.failures,
            "durable_writes_dropped": self.writer.dropped,
            "key_hydrations": self.hydrator.key_loads,
            "scope_hydrations": self.hydrator.scope_loads,
        }
