"""A log of a failing dependency that does not flood: start, counted summaries, end.

At 20 messages a second a database outage used to write hundreds of lines a
second (a warning per message from several layers and a chained traceback
per failed turn). An `OutageLog` writes instead:

- one line when the outage starts (with the first error's stack);
- for each distinct error (exception type and first line of its message), a
  compact stack the first time it is seen (again after `STACK_REPEAT_SECONDS`)
  and then one line per `interval` with how often it happened and where;
- one line when the outage ends, with its length and failure count.

It imports no Django and reads time from an injected clock, so tests drive
the interval without sleeping. Call it from one thread (the event loop).
"""

from __future__ import annotations

import logging
import sysconfig
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: Seconds between two summary lines about one error.
DEFAULT_INTERVAL_SECONDS = 10.0
#: A distinct error's stack is shown again after this long (a later outage).
STACK_REPEAT_SECONDS = 3600.0
#: Distinct errors told apart per outage; later ones are counted together.
MAX_DISTINCT_ERRORS = 20
#: Longest part of a message kept in an error's key.
MESSAGE_LIMIT = 200

ErrorKey = tuple[str, str]
_OTHER: ErrorKey = ("other errors", "")


def on_log_trail(count: int) -> bool:
    """Tell whether a running count is one to log (1, 2, 4, 8...): a trail, no flood."""
    return count > 0 and count & (count - 1) == 0


def error_key(exc: BaseException) -> ErrorKey:
    """Return what tells two errors apart: the type and the message's first line."""
    lines = str(exc).strip().splitlines()
    return type(exc).__name__, (lines[0].strip() if lines else "")[:MESSAGE_LIMIT]


def describe(key: ErrorKey) -> str:
    """Return "Type: message" for an error key."""
    name, message = key
    return f"{name}: {message}" if message else name


def compact_stack(exc: BaseException) -> str:
    """Return one line per frame of `exc` (this project's frames and the innermost).

    The cause chain is left out: Django re-raises the driver's error with the
    driver's frames, so printing the chain showed every stack twice.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    lines = []
    for index, frame in enumerate(frames):
        if _is_library(frame.filename) and index != len(frames) - 1:
            continue
        lines.append(f"  at {_short(frame.filename)}:{frame.lineno} in {frame.name}")
    return "\n".join(lines)


_STDLIB = sysconfig.get_paths()["stdlib"]
_ROOT = str(Path(__file__).resolve().parents[1]) + "/"


def _is_library(filename: str) -> bool:
    return "site-packages" in filename or filename.startswith(_STDLIB)


def _short(filename: str) -> str:
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1]
    return filename.removeprefix(_ROOT).removeprefix(_STDLIB + "/")


@dataclass(slots=True)
class _Tally:
    """How often one distinct error happened, and where, since its last line."""

    total: int = 0
    pending: int = 0
    last_line: float = 0.0
    sources: Counter[str] = field(default_factory=Counter)


class OutageLog:
    """Log the failures of one dependency (`what`, e.g. "database") without flooding.

    `failure(source, exc)` records one failure seen by `source` (a cache
    layer, the pipeline); `success()` ends the outage; `flush()` writes the
    summary lines that are due (a timer calls it; every failure does too).
    """

    def __init__(
        self,
        what: str,
        *,
        logger: logging.Logger,
        interval: float = DEFAULT_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.logger = logger
        self.interval = interval
        self.clock = clock
        self.started_at: float | None = None
        self.failures = 0  # in the current (or last) outage
        self.outages = 0  # since the process started
        self._tallies: dict[ErrorKey, _Tally] = {}
        self._stacks_shown: dict[ErrorKey, float] = {}

    @property
    def active(self) -> bool:
        """Whether an outage is under way (a failure and no success since)."""
        return self.started_at is not None

    def failure(self, source: str, exc: BaseException) -> None:
        """Record one failure; log it only if it starts the outage or is a new error."""
        now = self.clock()
        key = error_key(exc)
        if self.started_at is None:
            self._start(now)
        self.failures += 1
        if key not in self._tallies and len(self._tallies) >= MAX_DISTINCT_ERRORS:
            key = _OTHER
        tally = self._tallies.get(key)
        if tally is None:
            self._tallies[key] = _Tally(total=1, last_line=now)
            self._first_sighting(key, source, exc, now)
            return
        tally.total += 1
        tally.pending += 1
        tally.sources[source] += 1
        self.flush()

    def _start(self, now: float) -> None:
        self.started_at = now
        self.failures = 0
        self.outages += 1
        self._tallies.clear()

    def _first_sighting(
        self, key: ErrorKey, source: str, exc: BaseException, now: float
    ) -> None:
        opening = "started" if self.failures == 1 else "goes on with a new error"
        shown = self._stacks_shown.get(key)
        if shown is not None and now - shown < STACK_REPEAT_SECONDS:
            self.logger.warning(
                "%s outage %s: %s: %s", self.what, opening, source, describe(key)
            )
            return
        self._remember_stack(key, now)
        self.logger.warning(
            "%s outage %s: %s: %s\n%s",
            self.what,
            opening,
            source,
            describe(key),
            compact_stack(exc),
        )

    def _remember_stack(self, key: ErrorKey, now: float) -> None:
        if len(self._stacks_shown) >= 4 * MAX_DISTINCT_ERRORS:
            oldest = min(self._stacks_shown, key=self._stacks_shown.__getitem__)
            del self._stacks_shown[oldest]
        self._stacks_shown[key] = now

    def flush(self) -> int:
        """Write a summary line per error whose interval has passed; return how many."""
        if self.started_at is None:
            return 0
        now = self.clock()
        written = 0
        for key, tally in self._tallies.items():
            if tally.pending and now - tally.last_line >= self.interval:
                self._summary(key, tally, now)
                written += 1
        return written

    def _summary(self, key: ErrorKey, tally: _Tally, now: float) -> None:
        assert self.started_at is not None
        self.logger.warning(
            "%s outage for %.0f s: %d more failures in %.0f s: %s (%s)",
            self.what,
            now - self.started_at,
            tally.pending,
            now - tally.last_line,
            describe(key),
            _sources(tally.sources),
        )
        tally.pending = 0
        tally.sources.clear()
        tally.last_line = now

    def success(self) -> None:
        """End the outage, if one is under way, with one line that sums it up."""
        if self.started_at is None:
            return
        lasted = self.clock() - self.started_at
        errors = ", ".join(
            f"{describe(key)} x{tally.total}" for key, tally in self._tallies.items()
        )
        self.logger.warning(
            "%s outage ended after %.1f s: %d failures (%s)",
            self.what,
            lasted,
            self.failures,
            errors,
        )
        self.started_at = None
        self._tallies.clear()


def _sources(counts: Counter[str]) -> str:
    return ", ".join(f"{name} {count}" for name, count in counts.most_common())
