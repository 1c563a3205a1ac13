"""What a receiver refused: every rejection counted, the first of each kind logged in one bounded line.

Anyone who can reach Redis can publish on the bus, so what it logs about a
message must not grow with the message, nor with how many are sent.
"""

from __future__ import annotations

import reprlib
import threading
from collections.abc import Callable
from typing import Any

#: The longest detail a rejection line quotes (the whole line stays under 2 KB).
MAX_DETAIL = 1_000
#: The kinds remembered; past this, new kinds are counted but not logged.
MAX_KINDS = 256

_short = reprlib.Repr()
_short.maxstring = 80
_short.maxother = 80
_short.maxlevel = 3
_short.maxtuple = _short.maxlist = _short.maxdict = 6


def shown(value: Any) -> str:
    """Return a short repr of `value` (bounded, whatever it is)."""
    return _short.repr(value)[:MAX_DETAIL]


def clipped(text: str, limit: int = MAX_DETAIL) -> str:
    """Return `text` cut to `limit` characters, saying so when cut."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 20]}... ({len(text)} chars)"


class Rejections:
    """Count refusals; log the first of each kind, once, in one bounded line."""

    def __init__(
        self,
        log: Callable[..., None],
        *,
        count: Callable[[str, int], None] = lambda name, n: None,
    ) -> None:
        self._log = log
        self._count = count
        self._kinds: set[str] = set()
        self._full = False
        self._lock = threading.Lock()

    def note(self, what: str, kind: str, detail: str, *, counter: str = "") -> None:
        """Count one refusal (under `counter`, if any); log `what` if its `kind` is new."""
        if counter:
            self._count(counter, 1)
        kind = clipped(kind, 100)
        with self._lock:
            if kind in self._kinds or self._full:
                return
            if len(self._kinds) >= MAX_KINDS:
                self._full = True
                kind, detail = "any kind", f"and more than {MAX_KINDS} kinds like it"
            else:
                self._kinds.add(kind)
        self._log(
            "bus: %s %s; further ones like it (%s) are only counted",
            what,
            clipped(detail),
            kind,
        )
