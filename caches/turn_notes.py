"""What happened during one turn (database failures, stale answers, misses), for the code inside it."""

from __future__ import annotations

import contextvars
from types import TracebackType

__all__ = ["TurnNotes", "note_miss"]


class TurnNotes:
    """The database failures of one turn: layers that failed, layers served stale.

    `with TurnNotes() as notes:` makes it the current turn's notes for the
    code (and tasks) that run inside the block.
    """

    __slots__ = ("failed", "stale", "missed", "_token")

    def __init__(self) -> None:
        self.failed: list[str] = []  # layers whose database read failed
        self.stale: list[str] = []  # layers that answered with a last good value
        self.missed: list[str] = []  # caches that missed (and loaded) this turn
        self._token: contextvars.Token[TurnNotes | None] | None = None

    def __enter__(self) -> TurnNotes:
        self._token = _current.set(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None


_current: contextvars.ContextVar[TurnNotes | None] = contextvars.ContextVar(
    "tomori_turn_notes", default=None
)


def note_miss(cache: str) -> None:
    """Record that `cache` missed during the current turn (the miss path only)."""
    notes = _current.get()
    if notes is not None:
        notes.missed.append(cache)
