"""The short-term memory step of a turn: read the user's and channel's entries, store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from discord.utils import DISCORD_EPOCH

from caches.layers.short_term_memory import (
    ShortTermMemoryEntry,
    StmMessage,
    short_term_memory_store,
)
from tomori.domain.repositories.servers import PersonaRecord

#: Characters of a message kept in short-term memory (bounds its memory).
STM_CONTENT_LIMIT = 500


class MemoryRead(NamedTuple):
    """What short-term memory held for the turn before it was stored (one per turn)."""

    found: int  # entries found: the user's, and the channel's (guilds only)
    user_turns: int | None  # None: nothing stored, or not read (reads_user False)
    server_turns: int | None


@dataclass(frozen=True, slots=True)
class MemoryStep:
    """How turns use short-term memory: whether to store, and how much to keep."""

    capture: bool  # store each turn after reading
    keep: int  # earlier messages a stored turn keeps besides its own

    async def run(
        self,
        message: Any,
        window: Sequence[Any],
        guild: Any,
        persona: PersonaRecord | None,
        *,
        self_id: int | None,
        parent_id: int | None = None,
        reads_user: bool = True,
    ) -> MemoryRead:
        """Read the user's and the channel's entries, then store this turn.

        `reads_user` False: the turn does not need the user's entry (it does
        not answer), so in a guild a user key this worker does not hold is
        not read; its store waits for a shared read (see the store's `turn`).
        """
        author, channel = message.author, message.channel
        persona_id = persona.id if persona is not None else None
        keep = self.keep
        messages_for = None
        if self.capture:

            def messages_for(
                conversation: ShortTermMemoryEntry | None,
            ) -> tuple[StmMessage, ...]:
                return turn_messages(keep, conversation, window, message, self_id)

        # The store's own turn (one coroutine): the store is rebuilt with the
        # registry, so it is looked up per turn.
        before = await short_term_memory_store().turn(
            user_disc_id=author.id,
            channel_disc_id=channel.id,
            server_disc_id=guild.id if guild is not None else None,
            persona_id=persona_id,
            messages_for=messages_for,
            channel_name=getattr(channel, "name", None),
            server_name=guild.name if guild is not None else None,
            parent_channel_disc_id=parent_id,
            reads_user=reads_user,
        )
        user_entry, server_entry = before
        return MemoryRead(
            found=(user_entry is not None) + (server_entry is not None),
            user_turns=user_entry.turn_count if user_entry is not None else None,
            server_turns=server_entry.turn_count if server_entry is not None else None,
        )


def turn_messages(
    keep: int,
    conversation: ShortTermMemoryEntry | None,
    window: Sequence[Any],
    message: Any,
    self_id: int | None,
) -> tuple[StmMessage, ...]:
    """Return the channel's latest messages: the stored ones plus this one.

    Reusing the stored StmMessages (rather than rebuilding them from the
    window every turn) shares them between the user and server entries and
    between successive turns, which keeps short-term memory small. The
    window seeds a conversation that has nothing stored yet.
    """
    if keep <= 0:
        return (stm_message(message, self_id),)
    if conversation is not None and conversation.messages:
        earlier: Sequence[StmMessage] = conversation.messages[-keep:]
    else:
        earlier = [stm_message(m, self_id) for m in window[-keep:]]
    return (*earlier, stm_message(message, self_id))


def stm_message(message: Any, self_id: int | None) -> StmMessage:
    """Return a discord.py message as short-term memory keeps it."""
    author = message.author
    return StmMessage(
        "assistant" if author.id == self_id else "user",
        message.content[:STM_CONTENT_LIMIT],
        # message.created_at, as the POSIX seconds StmMessage keeps: discord.py
        # derives it from the snowflake through a datetime, which this skips.
        ((message.id >> 22) + DISCORD_EPOCH) / 1000,
        author.display_name,
    )
