"""caches.core.frozen: frozen dataclasses built through a mutable twin."""

from __future__ import annotations

import dataclasses

import pytest

from caches.core.frozen import unfrozen_twin


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
