"""A worker's outbox follower: read what committed since the last poll and apply it.

It polls every `interval` seconds, and at once when woken (the bus lost its
subscription or saw a sequence gap). A process away from the outbox for
longer than its retention cannot know what was pruned meanwhile, so it
clears every invalidatable cache and starts over from the newest row.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from caches.messages import EventTuple
from caches.outbox import store
from caches.outbox.tracker import CatchUpTracker

logger = logging.getLogger(__name__)

#: Apply rows (events, created at, origin); the events parse as they are taken.
DeliverFn = Callable[[list[tuple[Sequence[EventTuple], float, str]]], None]
FlushFn = Callable[[str], None]


class OutboxFollower:
    """Poll the outbox after this process's high-water mark and deliver new rows."""

    def __init__(
        self,
        *,
        deliver: DeliverFn,
        flush: FlushFn,
        interval: float,
        retention: float,
        on_stats: Callable[[str, int], None] = lambda name, n: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tracker = CatchUpTracker(clock=clock)
        self._deliver = deliver
        self._flush = flush
        self.interval = interval
        self.retention = retention
        self._count = on_stats
        self._clock = clock
        self._last_ok: float | None = None
        self._next_prune = 0.0
        self._failing = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: When the running poll began (None: not polling); under `_polling`.
        self._poll_started: float | None = None
        self._polling = threading.Lock()

    def start(self) -> None:
        """Take the current newest row as the start, then poll in a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="tomori-outbox-follower", daemon=True
            )
            self._thread.start()

    def wake(self) -> None:
        """Poll now (the fast path may have missed something)."""
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop polling and join the thread; return whether it ended.

        A poll waiting on the database is not waited for: it only reads, so
        nothing is lost by leaving it (a daemon thread) to the process's exit,
        and a frozen database must not hold up the steps after this one.
        """
        with self._polling:
            self._stop.set()
            started = self._poll_started
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        if started is not None:
            logger.info(
                "outbox: stopped while a read has waited %.1f s on the database; "
                "not waiting for it",
                self._clock() - started,
            )
            return False
        thread.join(timeout)
        return not thread.is_alive()

    def note_applied(self, ids: Any) -> None:
        """Skip these outbox ids when the poll reaches them (already applied)."""
        if isinstance(ids, list | tuple) and ids:
            self.tracker.note_applied(i for i in ids if isinstance(i, int))

    def _run(self) -> None:
        while self._begin_poll():
            try:
                self.poll_once()
            finally:
                with self._polling:
                    self._poll_started = None
            self._wake.wait(self.interval)
            self._wake.clear()
        _close_connection()

    def _begin_poll(self) -> bool:
        # Under the lock `stop` takes: it sees either this poll or none at all.
        with self._polling:
            if self._stop.is_set():
                return False
            self._poll_started = self._clock()
            return True

    def poll_once(self) -> int:
        """Read and apply every new row; return how many rows were applied."""
        try:
            applied = self._poll()
        except Exception as exc:  # noqa: BLE001 (the database may be down: retry)
            self._note_failure(exc)
            return 0
        self._note_ok()
        return applied

    def _poll(self) -> int:
        now = self._clock()
        if self.tracker.high is None:
            self.tracker.start_at(store.newest_id())
        elif self._last_ok is not None and now - self._last_ok > self.retention:
            self._start_over(f"away from the outbox for {now - self._last_ok:.0f} s")
        applied = 0
        while True:
            rows = store.rows_after(self.tracker.high or 0, self.tracker.open_gaps())
            applied += self._apply(rows)
            if len(rows) < store.BATCH:
                break
        self._last_ok = now
        self._prune_now_and_then(now)
        return applied

    def _apply(self, rows: list[store.OutboxRow]) -> int:
        taken = self.tracker.take(rows)
        if self._stop.is_set():
            return 0  # read after `stop`: the process is shutting down
        if taken.overflow:
            self._start_over("too many open outbox gaps")
            return 0
        # Handed over unparsed, in one call: this thread holds the GIL as
        # little as it can while the loop applies (a waiting loop thread
        # gets it back only every 5 ms, `sys.getswitchinterval()`).
        try:
            self._deliver(
                [(row.events, row.created_at, row.origin) for row in taken.apply]
            )
        except Exception:  # the tracker has moved past them: say so
            logger.exception("outbox: applying %d row(s) failed", len(taken.apply))
        self._count("outbox_caught_up", len(taken.apply))
        self._count("outbox_skipped", taken.skipped)
        if taken.apply:
            origins = sorted({row.origin[:200] for row in taken.apply})
            more = f" and {len(origins) - 5} more" if len(origins) > 5 else ""
            logger.info(
                "outbox: applied %d write(s) the bus had not delivered, from %s%s",
                len(taken.apply),
                ", ".join(origins[:5]),
                more,
            )
        return len(taken.apply)

    def _start_over(self, reason: str) -> None:
        self._flush(reason)
        self.tracker.start_at(store.newest_id())
        self._count("outbox_restarts", 1)

    def _prune_now_and_then(self, now: float) -> None:
        if now < self._next_prune:
            return
        self._next_prune = now + max(60.0, self.retention / 10)
        removed = store.prune(older_than=dt.timedelta(seconds=self.retention))
        if removed:
            logger.info("outbox: pruned %d row(s) older than the retention", removed)

    def _note_failure(self, exc: Exception) -> None:
        self._count("outbox_failures", 1)
        _close_connection()
        if not self._failing:
            self._failing = True
            logger.warning("outbox: cannot read the invalidation outbox: %s", exc)

    def _note_ok(self) -> None:
        if self._failing:
            self._failing = False
            logger.warning("outbox: reading the invalidation outbox again")


def _close_connection() -> None:
    # A broken connection stays broken; the next poll opens a new one.
    from django.db import connection

    try:
        connection.close()
    except Exception:  # noqa: BLE001
        logger.debug("outbox: closing the connection failed", exc_info=True)
