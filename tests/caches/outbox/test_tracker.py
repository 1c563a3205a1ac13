"""The catch-up tracker: ids that commit out of order, rows applied ahead, gaps that time out."""

from __future__ import annotations

from caches.core import FakeClock
from caches.outbox.tracker import (
    GAP_TIMEOUT_SECONDS,
    MAX_GAPS,
    CatchUpTracker,
    OutboxRow,
)


def rows(*ids: int) -> list[OutboxRow]:
    return [
        OutboxRow(id=i, created_at=0.0, events=[("user", "key", (i,))]) for i in ids
    ]


def ids(taken) -> list[int]:  # type: ignore[no-untyped-def]
    return [row.id for row in taken.apply]


def test_new_rows_are_applied_once_in_id_order():
    tracker = CatchUpTracker(clock=FakeClock())
    tracker.start_at(10)
    assert ids(tracker.take(rows(9, 10, 11, 12))) == [11, 12]
    assert ids(tracker.take(rows(11, 12))) == []
    assert tracker.high == 12


def test_an_id_that_commits_late_is_asked_for_and_applied():
    tracker = CatchUpTracker(clock=FakeClock())
    tracker.start_at(0)
    # 2 was inserted before 3 but its transaction commits after 3's.
    assert ids(tracker.take(rows(1, 3))) == [1, 3]
    assert tracker.open_gaps() == [2]
    assert ids(tracker.take(rows(2))) == [2]
    assert tracker.open_gaps() == []


def test_a_gap_that_never_commits_is_dropped_after_the_timeout():
    clock = FakeClock()
    tracker = CatchUpTracker(clock=clock)
    tracker.start_at(0)
    tracker.take(rows(2))
    clock.advance(GAP_TIMEOUT_SECONDS - 1)
    assert tracker.open_gaps() == [1]
    clock.advance(2)
    assert tracker.open_gaps() == []


def test_rows_applied_by_the_fast_path_are_skipped():
    tracker = CatchUpTracker(clock=FakeClock())
    tracker.start_at(5)
    tracker.note_applied([6, 8])
    taken = tracker.take(rows(6, 7, 8))
    assert ids(taken) == [7] and taken.skipped == 2
    # Already passed: remembering it again would leak.
    tracker.note_applied([6])
    assert ids(tracker.take(rows(9))) == [9]


def test_a_fast_path_row_that_fills_a_gap_is_skipped_when_it_shows():
    tracker = CatchUpTracker(clock=FakeClock())
    tracker.start_at(0)
    tracker.take(rows(2))
    tracker.note_applied([1])
    taken = tracker.take(rows(1))
    assert ids(taken) == [] and taken.skipped == 1 and tracker.open_gaps() == []


def test_too_many_gaps_ask_for_a_flush():
    tracker = CatchUpTracker(clock=FakeClock())
    tracker.start_at(0)
    taken = tracker.take(rows(MAX_GAPS + 5))
    assert taken.overflow and tracker.open_gaps() == []
