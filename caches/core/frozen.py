"""Building frozen slotted dataclasses on hot paths: fill a mutable twin, then retype it.

A frozen dataclass's `__init__` sets each field through `object.__setattr__`
(about 100 ns a field) and `dataclasses.replace` adds a field walk on top. A
twin with the same fields and slots but not frozen sets them as plain slot
stores; then one `__class__` assignment (legal: identical slot layout, no
`__dict__`) makes the instance an ordinary frozen `cls`, equal to, and
hashing like, one built directly. Nothing else ever sees a twin instance.

    _Twin = unfrozen_twin(Point)
    point = _Twin(1, 2)            # or object.__new__(_Twin), then slot stores
    point.__class__ = Point        # frozen from here on

Used where one value is built per message: the pipeline's ResolvedTurn and
short-term memory's entries.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

T = TypeVar("T")


def unfrozen_twin(cls: type[T]) -> type[T]:
    """Return a mutable dataclass with `cls`'s fields, defaults and slots.

    Raises TypeError for a class the twin cannot stand in for: not a slotted
    dataclass, or one with a `__post_init__` (the twin would skip it).
    """
    if not dataclasses.is_dataclass(cls) or not hasattr(cls, "__slots__"):
        raise TypeError(f"{cls.__name__} is not a slotted dataclass")
    if getattr(cls, "__post_init__", None) is not None:
        raise TypeError(f"{cls.__name__} has __post_init__: build it directly")
    twin = dataclasses.make_dataclass(
        f"_Unfrozen{cls.__name__}",
        [(f.name, f.type, f) for f in dataclasses.fields(cls)],  # type: ignore[arg-type]
        slots=True,
    )
    if twin.__slots__ != cls.__slots__:  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__}: the twin's slots differ")
    return twin  # type: ignore[return-value]
