"""Short-term memory values: messages and the per-channel entry (immutable)."""

from __future__ import annotations

import itertools
from collections.abc import Collection
from dataclasses import FrozenInstanceError, dataclass, field, replace
from datetime import UTC, datetime
from sys import intern
from typing import Any

from caches.core.frozen import unfrozen_twin
from caches.layers.short_term_memory.keys import SERVER, USER
from tomori.domain.repositories.memory import DurableMemory

# Orders entries written within one clock tick (newest first listings).
_revisions = itertools.count(1)


def next_revision() -> int:
    """Return a number larger than every earlier one (write order)."""
    return next(_revisions)


class StmMessage:
    """One message of the conversation snippet (immutable, compact).

    Reads as the frozen dataclass it was: `role` ("user" or "assistant"),
    `content`, `timestamp` (an aware datetime) and `speaker` (the display
    name, so shared entries tell users apart), compared and hashed by those
    four. Short-term memory holds up to ten of these per entry across its
    whole cap, so each is kept small: a UTC timestamp is stored as its POSIX
    seconds (a float, 24 bytes, rebuilt on read; a 48-byte datetime per
    message otherwise) and the role and speaker strings are interned, one
    object per distinct name however many messages carry it.
    """

    __slots__ = ("role", "content", "_stamp", "speaker")

    role: str
    content: str
    _stamp: float | datetime
    speaker: str | None

    def __init__(
        self,
        role: str,
        content: str,
        timestamp: datetime | float,
        speaker: str | None = None,
    ) -> None:
        """`timestamp`: an aware datetime, or POSIX seconds (a UTC instant)."""
        # The slots' own setters: object.__setattr__ (which __setattr__ below
        # forbids anyway) would double the cost of this hot constructor.
        _set_role(self, intern(role))
        _set_content(self, content)
        if timestamp.__class__ is not float and timestamp.tzinfo is UTC:  # type: ignore[union-attr]
            timestamp = timestamp.timestamp()  # type: ignore[union-attr]
        _set_stamp(self, timestamp)
        _set_speaker(self, None if speaker is None else intern(speaker))

    @property
    def timestamp(self) -> datetime:
        """Return when the message was sent (an aware datetime, as given)."""
        stamp = self._stamp
        if stamp.__class__ is float:
            return datetime.fromtimestamp(stamp, UTC)  # type: ignore[arg-type]
        return stamp  # type: ignore[return-value]

    def _fields(self) -> tuple[str, str, datetime, str | None]:
        return (self.role, self.content, self.timestamp, self.speaker)

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not StmMessage:
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"StmMessage(role={self.role!r}, content={self.content!r}, "
            f"timestamp={self.timestamp!r}, speaker={self.speaker!r})"
        )

    def __reduce__(self) -> tuple[type[StmMessage], tuple[Any, ...]]:
        return (StmMessage, self._fields())


# A float's 53 bits hold POSIX seconds to about 0.24 us until 2106, so a UTC
# datetime (microseconds) is rebuilt exactly; any other tzinfo is kept as given.
_slot: Any = StmMessage.__dict__
_set_role = _slot["role"].__set__
_set_content = _slot["content"].__set__
_set_stamp = _slot["_stamp"].__set__
_set_speaker = _slot["speaker"].__set__
del _slot


@dataclass(frozen=True, slots=True)
class ShortTermMemoryEntry:
    """One channel's short-term memory in one scope (user or server)."""

    key: str
    scope: str
    channel_disc_id: int
    last_updated: datetime
    user_disc_id: int | None = None
    server_disc_id: int | None = None
    persona_id: int | None = None
    persona_lineage: tuple[int, ...] = ()
    channel_name: str | None = None
    server_name: str | None = None
    parent_channel_disc_id: int | None = None
    messages: tuple[StmMessage, ...] = ()
    summary: str | None = None
    categories: tuple[str, ...] = ()
    turn_count: int = 0
    summarized_turn_count: int = 0
    revision: int = field(default=0, compare=False)

    @property
    def has_summary(self) -> bool:
        """Tell whether the entry carries a summary (it lives longer)."""
        return bool(self.summary)

    @property
    def owner(self) -> int | None:
        """Return the user (user scope) or server (server scope) the key names."""
        return self.user_disc_id if self.scope == USER else self.server_disc_id

    def matches_lineage(self, lineage: Collection[int] | None) -> bool:
        """Tell whether the entry belongs to a persona of `lineage` (None: any)."""
        if lineage is None:
            return True
        if self.persona_id is not None and self.persona_id in lineage:
            return True
        return any(p in lineage for p in self.persona_lineage)

    def sort_key(self) -> tuple[datetime, int]:
        """Return the key that orders entries oldest to newest."""
        return (self.last_updated, self.revision)

    def durable(self) -> DurableMemory:
        """Return the durable fields (raw messages are memory-only)."""
        return DurableMemory(
            cache_key=self.key,
            scope=self.scope,
            channel_disc_id=self.channel_disc_id,
            user_disc_id=self.user_disc_id if self.scope == USER else None,
            server_disc_id=self.server_disc_id,
            persona_id=self.persona_id,
            summary=self.summary or "",
            categories=self.categories,
            turn_count=self.turn_count,
            summarized_turn_count=self.summarized_turn_count,
            updated_at=self.last_updated,
        )

    def evolve(self, **changes: object) -> ShortTermMemoryEntry:
        """Return a copy with `changes` and a new revision."""
        return replace(self, revision=next_revision(), **changes)  # type: ignore[arg-type]

    def with_turn(
        self,
        *,
        messages: tuple[StmMessage, ...],
        last_updated: datetime,
        persona_lineage: tuple[int, ...],
        channel_name: str | None,
        server_name: str | None,
        parent_channel_disc_id: int | None,
        categories: tuple[str, ...],
    ) -> ShortTermMemoryEntry:
        """Return the entry after one more stored turn (a new revision).

        The same as `evolve(...)` with these fields and `turn_count + 1`, built
        without `dataclasses.replace` (a store's hot path): see `_Draft`.
        """
        draft: Any = object.__new__(_Draft)
        draft.key = self.key
        draft.scope = self.scope
        draft.channel_disc_id = self.channel_disc_id
        draft.last_updated = last_updated
        draft.user_disc_id = self.user_disc_id
        draft.server_disc_id = self.server_disc_id
        draft.persona_id = self.persona_id
        draft.persona_lineage = persona_lineage
        draft.channel_name = channel_name
        draft.server_name = server_name
        draft.parent_channel_disc_id = parent_channel_disc_id
        draft.messages = messages
        draft.summary = self.summary
        draft.categories = categories
        draft.turn_count = self.turn_count + 1
        draft.summarized_turn_count = self.summarized_turn_count
        draft.revision = next(_revisions)
        draft.__class__ = ShortTermMemoryEntry
        return draft  # type: ignore[no-any-return]


def fresh_entry(
    key: str,
    scope: str,
    channel_disc_id: int,
    last_updated: datetime,
    user_disc_id: int | None,
    server_disc_id: int | None,
    persona_id: int | None,
) -> ShortTermMemoryEntry:
    """Return an empty entry (what the constructor builds, without its 17 setattrs)."""
    draft: Any = object.__new__(_Draft)
    draft.key = key
    draft.scope = scope
    draft.channel_disc_id = channel_disc_id
    draft.last_updated = last_updated
    draft.user_disc_id = user_disc_id
    draft.server_disc_id = server_disc_id
    draft.persona_id = persona_id
    draft.persona_lineage = () if persona_id is None else (persona_id,)
    draft.channel_name = None
    draft.server_name = None
    draft.parent_channel_disc_id = None
    draft.messages = ()
    draft.summary = None
    draft.categories = ()
    draft.turn_count = 0
    draft.summarized_turn_count = 0
    draft.revision = 0
    draft.__class__ = ShortTermMemoryEntry
    return draft  # type: ignore[no-any-return]


# Entries are built through a mutable twin: two per stored turn (see
# caches.core.frozen). StmMessage is a compact slotted value with its own
# fast constructor.
_Draft = unfrozen_twin(ShortTermMemoryEntry)


def entry_from_durable(record: DurableMemory) -> ShortTermMemoryEntry:
    """Rebuild an entry (without messages) from its durable record."""
    return ShortTermMemoryEntry(
        key=record.cache_key,
        scope=record.scope if record.scope in (USER, SERVER) else USER,
        channel_disc_id=record.channel_disc_id,
        last_updated=record.updated_at,
        user_disc_id=record.user_disc_id,
        server_disc_id=record.server_disc_id,
        persona_id=record.persona_id,
        persona_lineage=() if record.persona_id is None else (record.persona_id,),
        summary=record.summary or None,
        categories=tuple(record.categories),
        turn_count=record.turn_count,
        summarized_turn_count=record.summarized_turn_count,
    )
