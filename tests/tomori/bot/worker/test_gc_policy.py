"""tomori.bot.gc_policy: the start-up heap frozen out of the cyclic GC's full collections."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from tomori.bot import gc_policy


@pytest.fixture
def thawed() -> Iterator[None]:
    gc_policy._reset_for_tests()
    yield
    gc_policy._reset_for_tests()


def test_start_up_objects_are_frozen_once_and_garbage_is_collected_first(
    thawed: None,
) -> None:
    class Node:
        other: object

    kept = [Node() for _ in range(1000)]
    cycle = Node()
    cycle.other = cycle  # cyclic garbage: must be collected, not frozen
    gone = weakref.ref(cycle)
    del cycle
    frozen = gc_policy.freeze_start_up()
    # frozen objects are still freed by refcount: the count can only fall
    assert frozen is not None and frozen >= gc.get_freeze_count() >= len(kept)
    assert gone() is None  # collected before the freeze
    # live objects sit in the permanent generation: full collections skip them
    assert not any(o is kept[0] for o in gc.get_objects())
    assert gc_policy.freeze_start_up() is None  # once per process
    assert gc.get_freeze_count() <= frozen  # nothing frozen again


def test_after_the_freeze_young_collections_are_rarer_but_still_collect_cycles(
    thawed: None,
) -> None:
    class Node:
        other: object

    gc_policy.freeze_start_up()
    assert gc.get_threshold()[0] == gc_policy.YOUNG_THRESHOLD
    cycle = Node()
    cycle.other = cycle
    gone = weakref.ref(cycle)
    del cycle
    assert gone() is not None  # cyclic garbage waits for a collection...
    kept = [[] for _ in range(2 * gc_policy.YOUNG_THRESHOLD)]  # tracked objects
    assert gone() is None  # ...which the allocations past the threshold ran
    assert len(kept) == 2 * gc_policy.YOUNG_THRESHOLD
