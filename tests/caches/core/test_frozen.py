"""caches.core.frozen: frozen dataclasses built through a mutable twin."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from caches.core.frozen import unfrozen_twin
from caches.layers.short_term_memory.entry import StmMessage, make_message


@dataclasses.dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()


def test_a_twin_built_value_is_the_frozen_value() -> None:
    twin = unfrozen_twin(Point)
    built = twin(1, tags=("a",))
    built.__class__ = Point
    assert type(built) is Point and built == Point(1, tags=("a",))
    assert hash(built) == hash(Point(1, 0, ("a",)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.x = 2  # type: ignore[misc]


def test_short_term_memory_messages_are_built_through_the_twin() -> None:
    at = datetime(2026, 1, 2, tzinfo=UTC)
    fast = make_message("user", "hi", at, "Ann")
    assert type(fast) is StmMessage
    assert fast == StmMessage("user", "hi", at, "Ann") and hash(fast) == hash(
        StmMessage("user", "hi", at, "Ann")
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.content = "changed"  # type: ignore[misc]


def test_a_class_with_post_init_gets_no_twin() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        value: int

        def __post_init__(self) -> None:
            pass

    with pytest.raises(TypeError, match="__post_init__"):
        unfrozen_twin(Checked)


def test_a_class_without_slots_gets_no_twin() -> None:
    @dataclasses.dataclass(frozen=True)
    class Loose:
        value: int

    with pytest.raises(TypeError, match="slotted"):
        unfrozen_twin(Loose)
