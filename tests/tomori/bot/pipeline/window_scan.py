"""The history window by scanning discord.py's message deque: what RecentMessages must equal.

This is how the pipeline found the window before its per-channel index
(tomori.bot.pipeline.history.RecentMessages); the tests keep it as the
reference the index is checked against.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from typing import Any

from discord import PartialMessageable

from tomori.bot.pipeline.history import DEFAULT_HISTORY_LIMIT, DEFAULT_SCAN_LIMIT


def history_window(
    cached: Iterable[Any] | None,
    message: Any,
    *,
    limit: int = DEFAULT_HISTORY_LIMIT,
    scan_limit: int = DEFAULT_SCAN_LIMIT,
) -> list[Any]:
    """Return the channel's cached messages before `message`, oldest first."""
    if not cached or limit <= 0:
        return []
    channel, message_id = message.channel, message.id
    if message.guild is None or isinstance(channel, PartialMessageable):
        # DM and uncached channels are a new object per message: match by id.
        return _window_by_id(cached, channel.id, message_id, limit, scan_limit)
    found: list[Any] = []
    # reversed() on a deque walks from the newest end without copying it, and
    # a guild channel is one object for all its messages: `is` is the cheap test.
    for other in islice(reversed(cached), scan_limit):  # type: ignore[call-overload]
        if other.channel is channel and other.id < message_id:
            found.append(other)
            if len(found) == limit:
                break
    found.reverse()
    return found


def _window_by_id(
    cached: Iterable[Any], channel_id: int, message_id: int, limit: int, scan: int
) -> list[Any]:
    found = [
        other
        for other in islice(reversed(cached), scan)  # type: ignore[call-overload]
        if other.channel.id == channel_id and other.id < message_id
    ][:limit]
    found.reverse()
    return found
