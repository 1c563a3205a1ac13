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
    """The scan over the newest `scan` messages received, the deleted left out.

    A deleted message keeps its place among the newest received: deleting
    one does not bring back a message that already fell out of the scan.
    """
    from tomori.bot.pipeline.history import RecentMessages

    channels = [SimpleNamespace(id=100 + n) for n in range(4)]
    received: list[SimpleNamespace] = []
    deleted: set[int] = set()
    index = RecentMessages(scan_limit=scan)
    next_id = 1
    for action, n, dm in steps:
        if action == "add":
            # a DM's channel is a new object per message (same id)
            channel = SimpleNamespace(id=200 + n) if dm else channels[n]
            current = message(next_id, channel, guild=None if dm else GUILD)
            next_id += 1
            received.append(current)
            index.add(current)
            newest = received[-scan:] if scan else []
            cached = deque(m for m in newest if m.id not in deleted)
            expected = history_window(cached, current, limit=limit, scan_limit=scan)
            assert index.window(current, limit) == expected
        elif any(m.id == n for m in received) and n not in deleted:
            channel_id = next(m.channel.id for m in received if m.id == n)
            deleted.add(n)
            index.forget(channel_id, {n})


def test_a_deletion_does_not_bring_back_a_message_that_fell_out() -> None:
    """The example Hypothesis found: deletions once re-admitted a dropped message."""
    from tomori.bot.pipeline.history import RecentMessages

    here = SimpleNamespace(id=10)
    index = RecentMessages(scan_limit=9)
    for i in range(1, 11):  # 1 falls out of the newest 9
        index.add(message(i, here))
    index.forget(here.id, {2, 3})
    current = message(11, here)
    index.add(current)

    window = index.window(current, limit=20)

    assert [m.id for m in window] == [4, 5, 6, 7, 8, 9, 10]
    assert len(index) == 9  # 3..11 hold their slots, 2 and 3 deleted
