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
    user_turns: int | None  # None: nothing stored
    server_turns: int | None


#: A turn that does not touch short-term memory (a quiet one).
NO_MEMORY = MemoryRead(0, None, None)


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
    ) -> MemoryRead:
        """Read the user's and the channel's entries, then capture this turn.

        Runs on the turns that answer (and DMs): short-term memory captures a
        conversation when the bot takes part in it (after the reply, in the
        spec's words), with the messages said since the last capture taken
        from the history `window` (see `turn_messages`).
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
    """Return the channel's latest messages: the captured ones, those since, this one.

    A conversation is captured when the bot answers, so what was stored at
    the last capture misses what was said since: the history `window` (the
    channel's messages before this one, oldest first, from discord.py's
    message cache) holds that, the bot's own replies included. The stored
    StmMessages are reused (not rebuilt from the window each turn), which
    shares them between the user and server entries and between successive
    captures and keeps short-term memory small; the window alone seeds a
    conversation that has nothing stored, and the stored messages alone
    serve when the window has lost them (a restart empties discord.py's
    cache).
    """
    if keep <= 0:
        return (stm_message(message, self_id),)
    stored: Sequence[StmMessage] = (
        conversation.messages if conversation is not None else ()
    )
    earlier = (*stored, *_said_since(stored, window, keep, self_id))[-keep:]
    return (*earlier, stm_message(message, self_id))


def _said_since(
    stored: Sequence[StmMessage], window: Sequence[Any], keep: int, self_id: int | None
) -> tuple[StmMessage, ...]:
    """Return the last `keep` window messages said after the `stored` ones, oldest first.

    Compared at Discord's resolution (a snowflake's millisecond): a window
    message of a later millisecond than the last stored one is new, of an
    earlier one is not, and of the same one is new unless it is stored.
    """
    if not stored:
        return tuple([stm_message(m, self_id) for m in window[-keep:]])
    last_ms = round(stored[-1].timestamp.timestamp() * 1000)
    same_ms = {
        (s.role, s.content, s.speaker)
        for s in stored
        if round(s.timestamp.timestamp() * 1000) == last_ms
    }
    since: list[StmMessage] = []
    for other in reversed(window):
        if len(since) == keep:
            break
        ms = (other.id >> 22) + DISCORD_EPOCH
        if ms < last_ms:
            break
        kept = stm_message(other, self_id)
        if ms == last_ms and (kept.role, kept.content, kept.speaker) in same_ms:
            break
        since.append(kept)
    since.reverse()
    return tuple(since)


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
