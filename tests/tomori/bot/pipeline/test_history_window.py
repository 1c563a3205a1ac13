"""history_window: the channel's cached messages before a message, oldest first."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace
from typing import Any

from tomori.bot.pipeline import history_window

GUILD = SimpleNamespace(id=1)


def message(message_id: int, channel: Any, guild: Any = GUILD) -> SimpleNamespace:
    return SimpleNamespace(id=message_id, channel=channel, guild=guild)


def test_window_holds_the_channels_earlier_messages_oldest_first() -> None:
    here, there = SimpleNamespace(id=10), SimpleNamespace(id=20)
    cached = deque(message(i, here if i % 2 else there) for i in range(1, 12))
    current = message(12, here)
    cached.append(current)

    window = history_window(cached, current, limit=3)

    assert [m.id for m in window] == [7, 9, 11]


def test_window_leaves_out_messages_newer_than_the_current_one() -> None:
    here = SimpleNamespace(id=10)
    current = message(5, here)
    cached = deque([message(4, here), current, message(6, here)])

    assert [m.id for m in history_window(cached, current)] == [4]


def test_window_looks_only_through_the_newest_scan_limit_messages() -> None:
    here, busy = SimpleNamespace(id=10), SimpleNamespace(id=20)
    cached = deque([message(1, here), *(message(i, busy) for i in range(2, 102))])
    current = message(200, here)

    assert history_window(cached, current, scan_limit=100) == []
    assert [m.id for m in history_window(cached, current, scan_limit=101)] == [1]


def test_direct_messages_match_their_channel_by_id() -> None:
    # discord.py builds a new DMChannel object for every direct message.
    cached = deque(message(i, SimpleNamespace(id=30), guild=None) for i in (1, 2))
    current = message(3, SimpleNamespace(id=30), guild=None)

    assert [m.id for m in history_window(cached, current)] == [1, 2]


def test_no_message_cache_means_an_empty_window() -> None:
    assert history_window(None, message(1, SimpleNamespace(id=1))) == []
