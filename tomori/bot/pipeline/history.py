"""The history window of a turn: discord.py's cached messages of the channel.

The real bot fetches history over REST; here the window is what discord.py
already holds, so a turn costs no request. discord.py keeps one deque of the
newest messages of the whole process (`max_messages`), so the window is the
channel's last `limit` messages among the newest `scan_limit` of that deque:
scanning the deque from its newest end stops early in a busy channel and is
bounded in a quiet one, whose older history a real context build would fetch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from caches.layers.markdown_table import get_cached_markdown_table
from caches.layers.persona_sprite_message import (
    peek_persona_sprite_message,
    prime_persona_sprite_message_records,
)
from caches.layers.voice_transcript import get_cached_voice_transcript
from tomori.domain.repositories.sprites import SpriteMessageRecord

#: Messages of the channel the window holds (older first once built).
DEFAULT_HISTORY_LIMIT = 10
#: Newest process-wide cached messages looked through to find them.
DEFAULT_SCAN_LIMIT = 200
#: discord.py's MessageFlags.voice bit (a voice message).
VOICE_MESSAGE_FLAG = 1 << 13


@dataclass(frozen=True, slots=True)
class HistoryContext:
    """What the caches know about the window's messages."""

    size: int
    sprite_records: tuple[SpriteMessageRecord, ...]
    transcripts_found: int
    tables_found: int


EMPTY_HISTORY = HistoryContext(0, (), 0, 0)


class RecentMessages:
    """The newest `scan_limit` messages the bot received, indexed by channel.

    The window a scan of discord.py's deque would find (a channel's last
    `limit` messages among the process's newest `scan_limit`, before the
    current one; tests/tomori/bot/pipeline/window_scan.py is that scan, the
    tests' reference), in O(limit) instead of O(scan_limit): in the
    production scenario (4,128 channels) a channel's earlier messages are
    almost never among the newest 200, so the scan walked all 200 on nearly
    every turn. Every received message is `add`ed
    (the pipeline does it first thing, for skipped messages too); deleted
    ones are `forget`-ten, as discord.py drops them from its deque, but still
    count toward the newest `scan_limit` received (a deletion does not bring
    back a message that already fell out, which a rescan of discord.py's
    shrunken deque would; a real context build fetches older history). It
    holds at most `scan_limit` references (the bound is capped at discord.py's own
    `max_messages`): to messages discord.py caches anyway, and to deleted
    ones until they age out of the newest `scan_limit`.
    """

    __slots__ = ("scan_limit", "_order", "_channels")

    def __init__(self, scan_limit: int = DEFAULT_SCAN_LIMIT) -> None:
        self.scan_limit = scan_limit
        self._order: deque[Any] = deque()  # oldest first
        self._channels: dict[int, deque[Any]] = {}

    def __len__(self) -> int:
        return len(self._order)

    def add(self, message: Any) -> None:
        """Note a received message (the newest)."""
        if self.scan_limit <= 0:
            return
        channel_id = message.channel.id
        recent = self._channels.get(channel_id)
        if recent is None:
            recent = self._channels[channel_id] = deque()
        recent.append(message)
        order = self._order
        order.append(message)
        if len(order) > self.scan_limit:
            self._drop(order.popleft())

    def _drop(self, message: Any) -> None:
        channel_id = message.channel.id
        recent = self._channels.get(channel_id)
        if recent is None:
            return
        # The global oldest is its channel's oldest (forget drops from both).
        if recent and recent[0] is message:
            recent.popleft()
        if not recent:
            del self._channels[channel_id]

    def forget(self, channel_id: int, message_ids: Collection[int]) -> None:
        """Drop deleted messages (discord.py drops them from its cache too)."""
        recent = self._channels.get(channel_id)
        if not recent or not message_ids:
            return
        gone = [m for m in recent if m.id in message_ids]
        for message in gone:
            recent.remove(message)
        # A deleted message keeps its slot in `_order` until it ages out, so
        # the scan covers the newest `scan_limit` messages received: removing
        # it would make room that a deque scan fills with a message the index
        # already dropped. `_drop` skips it then (it is no longer its
        # channel's oldest).
        if not recent:
            del self._channels[channel_id]

    def window(self, message: Any, limit: int = DEFAULT_HISTORY_LIMIT) -> list[Any]:
        """Return the channel's noted messages before `message`, oldest first."""
        recent = self._channels.get(message.channel.id)
        if not recent or limit <= 0:
            return []
        message_id = message.id
        found: list[Any] = []
        for other in reversed(recent):
            if other.id < message_id:
                found.append(other)
                if len(found) == limit:
                    break
        found.reverse()
        return found


def _is_audio(message: Any) -> bool:
    if message.flags.value & VOICE_MESSAGE_FLAG:
        return True
    return any((a.content_type or "").startswith("audio/") for a in message.attachments)


async def resolve_history(window: Sequence[Any]) -> HistoryContext:
    """Prime sprite records for the window's webhook messages; look up transcripts."""
    if not window:
        return EMPTY_HISTORY
    webhook_ids = [m.id for m in window if m.webhook_id is not None]
    records: tuple[SpriteMessageRecord, ...] = ()
    if webhook_ids:
        # One batched query for the ids not cached yet; then cache reads only.
        await prime_persona_sprite_message_records(webhook_ids)
        found = (peek_persona_sprite_message(i) for i in webhook_ids)
        records = tuple(r for r in found if r is not None)
    with_files = [m for m in window if m.attachments or m.flags.value]
    transcripts = sum(
        get_cached_voice_transcript(m.id).found for m in with_files if _is_audio(m)
    )
    # Rendered tables are image attachments: only those can have markdown.
    tables = sum(
        get_cached_markdown_table(m.id).found for m in with_files if m.attachments
    )
    return HistoryContext(len(window), records, transcripts, tables)
