"""The history window: the channel's cached messages before a message, oldest first.

The scan (window_scan.history_window, the reference) and the index the
pipeline uses (RecentMessages), checked to give the same windows.
"""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tomori.bot.pipeline.window_scan import history_window

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


# ------------------------------------------------------------ the index


def test_the_index_windows_a_channel_without_scanning_others() -> None:
    from tomori.bot.pipeline.history import RecentMessages

    here, busy = SimpleNamespace(id=10), SimpleNamespace(id=20)
    index = RecentMessages(scan_limit=100)
    index.add(message(1, here))
    for i in range(2, 101):
        index.add(message(i, busy))
    current = message(200, here)
    index.add(current)
    # message 1 fell out of the newest 100: as history_window(scan_limit=100)
    assert index.window(current) == [] and len(index) == 100
    assert [m.id for m in index.window(message(201, busy), limit=3)] == [98, 99, 100]


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(0, 3), st.booleans()),
            st.tuples(st.just("delete"), st.integers(0, 40), st.booleans()),
        ),
        max_size=80,
    ),
    scan=st.integers(0, 12),
    limit=st.integers(0, 5),
)
def test_the_index_gives_the_window_the_scan_gives(
    steps: list[tuple[str, int, bool]], scan: int, limit: int
) -> None:
    """Same windows as history_window over discord.py's deque, deletions included."""
    from tomori.bot.pipeline.history import RecentMessages

    channels = [SimpleNamespace(id=100 + n) for n in range(4)]
    cached: deque[SimpleNamespace] = deque(maxlen=1000)  # discord.py's deque
    index = RecentMessages(scan_limit=scan)
    next_id = 1
    for action, n, dm in steps:
        if action == "add":
            # a DM's channel is a new object per message (same id)
            channel = SimpleNamespace(id=200 + n) if dm else channels[n]
            current = message(next_id, channel, guild=None if dm else GUILD)
            next_id += 1
            cached.append(current)
            index.add(current)
            expected = history_window(cached, current, limit=limit, scan_limit=scan)
            assert index.window(current, limit) == expected
        else:
            found = [m for m in cached if m.id == n]
            if found:  # discord.py removes a deleted message from its deque
                cached.remove(found[0])
                index.forget(found[0].channel.id, {n})
