"""ShortTermMemoryStore: the cache, its durable write queue and hydration, as one unit.

The registry sees the store as a cache (it satisfies `ManagedCache`), so a
registry clear also forgets which scopes were hydrated and stales in-flight
loads. Clearing the cache never touches the table: only the explicit
`clear_short_term_memory_*` operations delete durable rows.
"""

from __future__ import annotations

from collections.abc import (
    Awaitable,
    Callable,
    Collection,
    Hashable,
    Iterable,
    Sequence,
)
from datetime import datetime
from typing import Any, NamedTuple, TypedDict

from caches.core import MISSING, BoundedTTLCache, Clock
from caches.layers._support import run_db
from caches.layers.short_term_memory import keys as k
from caches.layers.short_term_memory.durable import DurableWriter
from caches.layers.short_term_memory.entry import (
    ShortTermMemoryEntry,
    StmMessage,
    fresh_entry,
)
from caches.layers.short_term_memory.hydration import (
    Hydrator,
    Scope,
    crude_ttl,
    summary_ttl,
)
from caches.layers.short_term_memory.stored_keys import StoredKeys
from tomori.domain.knobs import knobs
from tomori.domain.repositories import memory as repo
from tomori.domain.repositories.memory import DeleteKeys, DeleteWhere

Value = ShortTermMemoryEntry | None
#: A store's (scope, key) pairs: the user key, then the server key in a guild.
Targets = list[tuple[str, str]]

#: The cache's scope indexes (see `caches.core.store`): OWNER lists a user's
#: or a server's keys (and clears a user's), CHANNEL a channel's keys in
#: every scope and persona. Values are the key's own text fields, so
#: indexing a key is one `split`, no int parse.
OWNER = "owner"
CHANNEL = "channel"


class TurnMemory(NamedTuple):
    """A turn's short-term memory as it was before the turn was stored."""

    user: ShortTermMemoryEntry | None  # None: nothing stored
    server: ShortTermMemoryEntry | None  # None in a DM, or nothing stored


class ScopeFilters(TypedDict, total=False):
    """What a listing of one user's or server's entries leaves out (see list_scope)."""

    exclude_channel_disc_id: int | None
    persona_lineage: Collection[int] | None
    limit: int | None


#: The scope words as the index keeps them: one object per word, not one
#: per indexed owner (each `split` makes a new "user" or "server").
_SCOPE_WORDS = {k.USER: k.USER, k.SERVER: k.SERVER}


def _owner_scope(key: str) -> tuple[tuple[str, str], ...]:
    """Return ((scope, owner),) of `shortterm:{scope}:{owner}:{channel}[...]`."""
    parts = key.split(":", 4)
    if len(parts) < 4:
        return ()
    word = parts[1]
    return ((_SCOPE_WORDS.get(word, word), parts[2]),)


def _channel_scope(key: str) -> tuple[str, ...]:
    """Return (channel,) of `shortterm:{scope}:{owner}:{channel}[...]`."""
    parts = key.split(":", 4)
    return (parts[3],) if len(parts) >= 4 else ()


def owner_scope_value(scope: str, owner: int) -> tuple[str, str]:
    """Return the OWNER index value of a user's or server's keys."""
    return (scope, str(owner))


def _fresh_entry(
    scope: str,
    key: str,
    now: datetime,
    channel_disc_id: int,
    user_disc_id: int | None,
    server_disc_id: int | None,
    persona_id: int | None,
) -> ShortTermMemoryEntry:
    """Return an empty entry for `key`."""
    return fresh_entry(
        key,
        scope,
        channel_disc_id,
        now,
        user_disc_id if scope == k.USER else None,
        server_disc_id,
        persona_id,
    )


def _targets(
    channel: int, user: int | None, server: int | None, persona: int | None
) -> Targets:
    """Return (scope, key): the user key if a user, the server key if a guild."""
    key = k.short_term_memory_key
    targets = []
    if user is not None:
        targets.append((k.USER, key(k.USER, user, channel, persona)))
    if server is not None:
        targets.append((k.SERVER, key(k.SERVER, server, channel, persona)))
    return targets


class Turn(NamedTuple):
    """One stored turn: what `with_turn` takes besides the base entry."""

    messages: tuple[StmMessage, ...]
    at: datetime
    persona_lineage: tuple[int, ...]
    channel_name: str | None
    server_name: str | None
    parent_channel_disc_id: int | None


def _with_turn(
    base: ShortTermMemoryEntry,
    turn: Turn,
    categories: tuple[str, ...] | None = None,
) -> ShortTermMemoryEntry:
    """Return `base` after `turn`: its fields where given, else the base's."""
    return base.with_turn(
        persona_lineage=turn.persona_lineage or base.persona_lineage,
        channel_name=turn.channel_name or base.channel_name,
        server_name=turn.server_name or base.server_name,
        parent_channel_disc_id=turn.parent_channel_disc_id
        or base.parent_channel_disc_id,
        messages=turn.messages,
        categories=base.categories if categories is None else categories,
        last_updated=turn.at,
    )


class ShortTermMemoryStore:
    """Short-term memory of one process: cache first, table behind."""

    def __init__(self, *, maxsize: int) -> None:
        self.cache: BoundedTTLCache[str, Value] = BoundedTTLCache(
            "short_term_memory",
            maxsize=maxsize,
            # Every write names its ttl; the cache's own is the crude one so
            # that most entries sit in its default queue (cheapest re-set).
            ttl=crude_ttl(),
            scopes={OWNER: _owner_scope, CHANNEL: _channel_scope},
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
        self.stored = StoredKeys()
        self.hydrator = Hydrator(self.cache, self.writer, self._put, stored=self.stored)

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

    def _write_all(self, entries: list[ShortTermMemoryEntry], *, turns: int) -> None:
        """Cache `entries` (a live write wins over any hydration), then queue their rows.

        The entries themselves are queued, all at once: their durable fields
        are taken when their batch is, so a key stored many times per batch
        converts once.
        """
        hydrator = self.hydrator
        if hydrator.loading:  # the warm path loads nothing: no touch then
            for entry in entries:
                hydrator.touch(entry.key)
        put, note = self.cache.set, self.stored.note
        crude, summarized = crude_ttl(), summary_ttl()
        for entry in entries:
            put(entry.key, entry, summarized if entry.summary else crude)
            note(entry.key)
        self.writer.submit_entries(entries, turns=turns)

    def _resident(self, targets: Targets) -> list[ShortTermMemoryEntry | None] | None:
        """Return the targets' values if every key is resident (counted hits), else None.

        A value is the entry, or None for a resident "nothing stored" marker.
        """
        peek = self.cache.peek
        values = []
        for _, key in targets:
            value = peek(key)
            if value is MISSING:
                return None
            values.append(value)
        self.cache.hits += len(values)
        return values

    def _fresh_for_none(
        self,
        targets: Targets,
        values: list[ShortTermMemoryEntry | None],
        channel: int,
        user: int | None,
        server: int | None,
        persona: int | None,
    ) -> list[ShortTermMemoryEntry]:
        """Return `values` with each None (nothing stored) as a fresh entry."""
        for value in values:
            if value is None:
                break
        else:
            return values  # type: ignore[return-value]  # the warm path: all stored
        bases = []
        for (scope, key), value in zip(targets, values, strict=True):
            if value is None:
                now = self.hydrator.wall_clock()
                value = _fresh_entry(scope, key, now, channel, user, server, persona)
            bases.append(value)
        return bases

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
        targets = _targets(channel_disc_id, user_disc_id, server_disc_id, persona_id)
        # A warm turn's keys are resident: no coroutine for the bases then.
        values = self._resident(targets) or await self._hydrated(targets)
        bases = self._fresh_for_none(
            targets, values, channel_disc_id, user_disc_id, server_disc_id, persona_id
        )
        return self._store_turn(
            bases,
            messages,
            lineage=tuple(persona_lineage),
            channel_name=channel_name,
            server_name=server_name,
            parent_channel_disc_id=parent_channel_disc_id,
            categories=None if categories is None else tuple(categories),
        )

    async def turn(
        self,
        *,
        user_disc_id: int,
        channel_disc_id: int,
        server_disc_id: int | None = None,
        persona_id: int | None = None,
        messages_for: Callable[[ShortTermMemoryEntry | None], Sequence[StmMessage]]
        | None = None,
        channel_name: str | None = None,
        server_name: str | None = None,
        parent_channel_disc_id: int | None = None,
    ) -> TurnMemory:
        """Read a turn's entries, then (with `messages_for`) store the turn: one pass.

        The same as `get` of the user key and (in a guild) the server key,
        then `store(messages=messages_for(conversation), persona_lineage=
        (persona_id,) ...)`, where the conversation is the server entry in a
        guild and the user entry in a DM; with the keys built, peeked and
        counted once. Returns the entries as they were before the store.
        """
        targets = _targets(channel_disc_id, user_disc_id, server_disc_id, persona_id)
        guild = server_disc_id is not None
        # A warm turn's keys are resident: read them inline, no coroutine.
        values = self._resident(targets) or await self._hydrated(targets)
        memory = TurnMemory(values[0], values[1] if guild else None)
        if messages_for is None:
            return memory
        # No await from here on: the read, the messages and the store are atomic.
        messages = messages_for(memory.server if guild else memory.user)
        bases = self._fresh_for_none(
            targets, values, channel_disc_id, user_disc_id, server_disc_id, persona_id
        )
        self._store_turn(
            bases,
            messages,
            lineage=() if persona_id is None else (persona_id,),
            channel_name=channel_name,
            server_name=server_name,
            parent_channel_disc_id=parent_channel_disc_id,
            categories=None,
        )
        return memory

    def _store_turn(
        self,
        bases: Sequence[ShortTermMemoryEntry],
        messages: Sequence[StmMessage],
        *,
        lineage: tuple[int, ...],
        channel_name: str | None,
        server_name: str | None,
        parent_channel_disc_id: int | None,
        categories: tuple[str, ...] | None,
    ) -> ShortTermMemoryEntry:
        """Write one stored turn over `bases` (no await: read-merge-write is atomic)."""
        turn = Turn(
            tuple(messages)[-knobs().SHORT_TERM_MEMORY_MAX_MESSAGES_PER_CHANNEL :],
            self.hydrator.wall_clock(),
            lineage,
            channel_name,
            server_name,
            parent_channel_disc_id,
        )
        written = [_with_turn(base, turn, categories) for base in bases]
        self._write_all(written, turns=1)
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
        targets = _targets(channel_disc_id, user_disc_id, server_disc_id, persona_id)
        values = self._resident(targets) or await self._hydrated(targets)
        bases = self._fresh_for_none(
            targets, values, channel_disc_id, user_disc_id, server_disc_id, persona_id
        )
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
        self._write_all(written, turns=0)
        return written

    async def _hydrated(self, targets: Targets) -> list[ShortTermMemoryEntry | None]:
        """Load the targets through the hydrator (which counts each), then read them.

        Read after the last await: a key loaded before it may have been
        written meanwhile. A value is the entry, or None: nothing stored.
        """
        for _, key in targets:
            await self.hydrator.ensure_key(key)
        return [self._current(key) for _, key in targets]

    async def maintain_stored_keys(self, *, shards: repo.Shards = None) -> bool:
        """Build the stored-keys filter if there is none or it is full; True if built.

        `shards` names the shard set whose rows this process stores (None:
        every row). Database errors propagate (the filter in use stays).
        """
        stored = self.stored
        if stored.building or not stored.needs_build():
            return False
        since = self.hydrator.window_start()

        def count() -> Awaitable[int]:
            return run_db(repo.count_memory_keys, updated_since=since, shards=shards)

        def page(after: str, limit: int) -> Awaitable[list[str]]:
            return run_db(
                repo.memory_keys_page,
                updated_since=since,
                after=after,
                limit=limit,
                shards=shards,
            )

        with self.writer.reading():  # queued_keys: what the pages may not hold
            return await stored.build(count, page, self.writer.queued_keys)

    async def flush(self) -> None:
        """Store every queued durable write, retrying (bound it by a timeout)."""
        await self.writer.flush()

    def pending_count(self) -> int:
        """Return the durable writes queued (a key once, however many turns wrote it)."""
        return self.writer.pending_count()

    def turns_behind(self) -> int:
        """Return the turns the table lacks (those of the queued writes)."""
        return self.writer.turns_behind()

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
        owner = scope[1]
        keys = self.cache.keys_in_scope(OWNER, owner_scope_value(scope[0], owner))
        peek = self.cache.peek
        live = []
        for key in keys:
            value = peek(key)
            if isinstance(value, ShortTermMemoryEntry):
                live.append(value)
        return live

    # ------------------------------------------------------------ clears

    def delete_scope(
        self,
        scope: str,
        value: Hashable,
        where: DeleteWhere,
        predicate: Callable[[str], bool],
    ) -> int:
        """Drop every key of one scope index value and their rows; return memories dropped.

        `predicate` tells the same keys apart by their text (for loads in
        flight, which are not in the index yet).
        """
        self.hydrator.touch_where(predicate)
        cache = self.cache
        # Count memories only, not the cached "nothing stored" markers.
        removed = sum(
            1
            for key in cache.keys_in_scope(scope, value)
            if cache.peek(key) is not None
        )
        cache.invalidate_scope(scope, value)
        self.writer.submit(where)
        return removed

    def delete_keys(
        self,
        keys: Iterable[str],
        where: DeleteWhere,
        predicate: Callable[[str], bool],
    ) -> int:
        """Drop `keys` (picked from an index) and the rows `where` covers; return memories dropped."""
        self.hydrator.touch_where(predicate)
        removed = 0
        for key in keys:
            removed += self._current(key) is not None
            self.cache.invalidate(key)
        self.writer.submit(where)
        return removed

    def channel_keys(self, channel_disc_id: int) -> list[str]:
        """Return the resident keys of a channel, in every scope and persona."""
        return self.cache.keys_in_scope(CHANNEL, str(channel_disc_id))

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
        return self.cache.clear_expired()

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
        return self.cache.clear()

    def invalidate(self, key: Any) -> int:
        """Drop one cached entry (the table keeps its row)."""
        self.hydrator.touch(key)
        return self.cache.invalidate(key)

    def set_clock(self, clock: Clock) -> None:
        """Read ttl time from `clock`."""
        self.cache.set_clock(clock)
        self._loaded.set_clock(clock)

    def maps(self) -> dict[str, BoundedTTLCache[Any, Any]]:
        """Return the entry map (the hydrated-scopes map is bookkeeping, not entries)."""
        return {"primary": self.cache}

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
            **self.stored.stats(),
        }
