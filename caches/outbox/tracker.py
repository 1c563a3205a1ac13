"""Which outbox rows this process has applied: a high-water mark, open gaps, rows applied ahead.

Pure bookkeeping (no Django), so its edge cases are tested with a fake clock.
Ids are allocated when a row is inserted but become visible when its
transaction commits, so they can appear out of order: a missing id below the
newest one seen is an open *gap* (a transaction still running, or one that
rolled back) that later polls ask for by id until it shows up or times out.
Rows already applied through the fast path (pub/sub, or this process's own
writes) are remembered as *ahead* and skipped when the poll reaches them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from caches.messages import EventTuple

#: A gap older than this is taken for a rolled-back transaction.
GAP_TIMEOUT_SECONDS = 600.0
#: More open gaps than this and the tracker gives up on them (and flushes).
MAX_GAPS = 10_000
#: Ids applied ahead of the poll that are remembered (oldest forgotten first).
MAX_AHEAD = 100_000


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One stored write's events, as the poll reads it."""

    id: int
    created_at: float  # wall-clock seconds
    events: Sequence[EventTuple]
    origin: str = ""


@dataclass(frozen=True, slots=True)
class Taken:
    """What one poll's rows mean: the rows to apply, and whether to flush instead."""

    apply: list[OutboxRow]
    skipped: int
    overflow: bool = False


class CatchUpTracker:
    """The applied-ids state of one process (thread-safe)."""

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.high: int | None = None
        self._gaps: dict[int, float] = {}
        self._ahead: OrderedDict[int, None] = OrderedDict()
        self._overflow = False

    def start_at(self, high: int) -> None:
        """Treat every id up to `high` as applied (start-up, or after a flush)."""
        with self._lock:
            self.high = high
            self._gaps.clear()
            self._ahead = OrderedDict((i, None) for i in self._ahead if i > high)

    def note_applied(self, ids: Iterable[int]) -> None:
        """Remember ids applied through the fast path, so the poll skips them."""
        with self._lock:
            for outbox_id in ids:
                passed = self.high is not None and outbox_id <= self.high
                if passed and outbox_id not in self._gaps:
                    continue  # the poll has read it already
                self._ahead[outbox_id] = None
            while len(self._ahead) > MAX_AHEAD:
                self._ahead.popitem(last=False)

    def open_gaps(self) -> list[int]:
        """Return the gap ids to ask for again, dropping those that timed out."""
        now = self._clock()
        with self._lock:
            expired = [
                i for i, t in self._gaps.items() if now - t > GAP_TIMEOUT_SECONDS
            ]
            for outbox_id in expired:
                del self._gaps[outbox_id]
            return sorted(self._gaps)

    def take(self, rows: Sequence[OutboxRow]) -> Taken:
        """Advance over `rows` (sorted by id); return those not applied yet."""
        now = self._clock()
        apply: list[OutboxRow] = []
        skipped = 0
        with self._lock:
            assert self.high is not None, "start_at() first"
            for row in rows:
                if not self._advance(row.id, now):
                    continue
                if row.id in self._ahead:
                    del self._ahead[row.id]
                    skipped += 1
                    continue
                apply.append(row)
            overflow, self._overflow = (
                self._overflow or len(self._gaps) > MAX_GAPS,
                False,
            )
            if overflow:
                self._gaps.clear()
        return Taken(apply=apply, skipped=skipped, overflow=overflow)

    def _advance(self, outbox_id: int, now: float) -> bool:
        assert self.high is not None
        if self._gaps.pop(outbox_id, None) is not None:
            return True
        if outbox_id <= self.high:
            return False  # seen before (a duplicate read)
        missing = range(self.high + 1, outbox_id)
        if len(missing) > MAX_GAPS:
            self._overflow = True
        else:
            self._gaps.update(dict.fromkeys(missing, now))
        self.high = outbox_id
        return True

    @property
    def gap_count(self) -> int:
        """Return how many ids are open gaps."""
        return len(self._gaps)
