"""The cache metrics logger: periodic two-sink samples, a background row writer, loop lag.

Every interval one ``cache_sizes`` snapshot goes to two sinks that fail at
different times (spec "Where the measurements go"): a JSON log line, and a
``metric_samples`` row written fire-and-forget on a background thread, so a
slow or dead database can neither block the event loop nor break the
cadence. The same tick writes a ``host_memory`` row with no log twin.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections, connections

from caches.core.periodic import Waiter, run_periodically, wait_or_stop
from caches.memory.readers import HostMemorySampler
from metrics.log import log_metric
from metrics.repository import MetricSampleRepository, default_repository

if TYPE_CHECKING:
    from caches.messages import WorkerSnapshot

logger = logging.getLogger(__name__)


_STOP = object()


class BackgroundMetricWriter:
    """Insert metric_samples rows on one daemon thread; ``submit`` never blocks or raises.

    A bounded backlog: while the database hangs, samples beyond
    ``max_pending`` are dropped (counted in ``dropped``), never queued without
    limit and never retried. The thread is a daemon so a hung insert cannot
    hold up process exit.
    """

    def __init__(
        self,
        repository: MetricSampleRepository | None = None,
        *,
        max_pending: int = 16,
    ) -> None:
        self.repository = repository
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_pending)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.dropped = 0
        self._backlogged = False
        self._closed = False

    def submit(self, name: str, fields: dict[str, Any]) -> Future[bool] | None:
        """Queue one row; return a future of whether it was stored, None if dropped."""
        if self._closed:
            self._note_dropped(name)
            return None
        self._ensure_thread()
        future: Future[bool] = Future()
        try:
            self._queue.put_nowait((name, fields, future))
        except queue.Full:
            self._note_dropped(name)
            return None
        self._backlogged = False
        return future

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every row queued so far is written; False on timeout."""
        if self._thread is None:
            return True
        if self._closed:  # the thread drains up to its stop marker, then ends
            self._thread.join(timeout)
            return not self._thread.is_alive()
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def close(self, timeout: float | None = 0) -> None:
        """Stop the thread after the rows already queued, waiting up to ``timeout``."""
        self._closed = True
        if self._thread is None:
            return
        # On a full queue the (hung) daemon thread dies with the process.
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_STOP)
        if timeout != 0:
            self._thread.join(timeout)

    def _note_dropped(self, name: str) -> None:
        self.dropped += 1
        if not self._backlogged:
            self._backlogged = True
            logger.warning(
                "metric_samples backlog full; dropping %s (database slow or down)",
                name,
            )

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._work, name="metric-samples", daemon=True
                )
                self._thread.start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                connections.close_all()  # this thread's connections only
                return
            if isinstance(item, threading.Event):  # a flush marker
                item.set()
                continue
            name, fields, future = item
            future.set_result(self._insert(name, fields))

    def _insert(self, name: str, fields: dict[str, Any]) -> bool:
        repository = self.repository or default_repository
        try:
            return repository.record_sample(name, fields)
        except Exception:  # record_sample never raises; a stand-in might
            logger.exception("metric_samples insert of %s raised", name)
            return False
        finally:
            close_old_connections()


_default_writer: BackgroundMetricWriter | None = None
_default_writer_lock = threading.Lock()


def default_writer() -> BackgroundMetricWriter:
    """Return the process's shared background writer (default repository)."""
    global _default_writer
    with _default_writer_lock:
        if _default_writer is None:
            _default_writer = BackgroundMetricWriter()
        return _default_writer


def emit_metric(
    name: str,
    fields: dict[str, Any],
    *,
    db: bool = True,
    writer: BackgroundMetricWriter | None = None,
) -> Future[bool] | None:
    """Log one metric line and, with ``db``, queue its metric_samples row.

    Safe from any thread, never blocks on the database, never raises; fits
    ``MemoryGuard(on_metric=...)``. Returns the row's future (None without
    ``db`` or when the backlog dropped it).
    """
    try:
        log_metric(name, fields)
    except Exception:  # telemetry must never break its caller
        logger.exception("metric log line %s failed", name)
    if not db:
        return None
    return (writer or default_writer()).submit(name, fields)


class LoopLagMonitor:
    """Measure event-loop scheduling delay with a periodic callback; report the peak.

    A callback asked for ``interval`` seconds from now that runs later than
    that was held up by whatever blocked the loop; the overshoot is the lag.
    """

    def __init__(
        self,
        *,
        interval_seconds: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_seconds = interval_seconds
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._expected: float | None = None
        self._peak = 0.0

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start measuring on ``loop`` (default: the running loop)."""
        self._loop = loop or asyncio.get_running_loop()
        self._schedule()

    def stop(self) -> None:
        """Stop measuring."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._expected = None

    def take_peak_ms(self) -> float | None:
        """Return the peak lag in ms since the last call and reset it; None if stopped."""
        if self._expected is None:
            return None
        # A tick still overdue right now counts too: the loop may be stuck.
        peak = max(self._peak, self._clock() - self._expected)
        self._peak = 0.0
        return round(max(peak, 0.0) * 1000, 3)

    def _schedule(self) -> None:
        assert self._loop is not None
        self._expected = self._clock() + self.interval_seconds
        self._handle = self._loop.call_later(self.interval_seconds, self._tick)

    def _tick(self) -> None:
        if self._expected is None:
            return
        self._peak = max(self._peak, self._clock() - self._expected)
        self._schedule()


#: For the first STARTUP_PERIOD_SECONDS after start, samples come every
#: STARTUP_INTERVAL_SECONDS (or the interval, if shorter), so the charts of a
#: fresh worker have a line within a minute instead of one dot for 5 minutes.
STARTUP_INTERVAL_SECONDS = 15.0
STARTUP_PERIOD_SECONDS = 300.0


class CacheMetricsLogger:
    """Every interval: a ``cache_sizes`` log line + row, and a ``host_memory`` row.

    ``run`` samples once at start, every ``startup_interval_seconds`` for the
    first ``startup_period_seconds``, then on the ``interval_seconds`` cadence,
    all measured by ``clock``. Nothing here awaits the database, so an outage
    costs rows, not ticks. ``wait`` is how the loop waits between ticks (tests
    drive it). ``snapshot`` returns the worker's snapshot, the one the dashboard
    shows (default: one built from this process's registry, ``client_getter``
    and ``guard``).
    """

    def __init__(
        self,
        *,
        interval_seconds: float,
        worker_id: str,
        client_getter: Callable[[], Any] | None = None,
        guard: Any = None,
        snapshot: Callable[[], WorkerSnapshot] | None = None,
        repository: MetricSampleRepository | None = None,
        host_sampler: HostMemorySampler | None = None,
        clock: Callable[[], float] = time.monotonic,
        writer: BackgroundMetricWriter | None = None,
        lag_monitor: LoopLagMonitor | None = None,
        wait: Waiter = wait_or_stop,
        startup_interval_seconds: float = STARTUP_INTERVAL_SECONDS,
        startup_period_seconds: float = STARTUP_PERIOD_SECONDS,
    ) -> None:
        if not interval_seconds > 0 or not startup_interval_seconds > 0:
            raise ValueError(
                "intervals must be > 0, got "
                f"{interval_seconds} and {startup_interval_seconds} (start-up)"
            )
        self.interval_seconds = interval_seconds
        self.startup_interval_seconds = min(startup_interval_seconds, interval_seconds)
        self.startup_period_seconds = startup_period_seconds
        self.worker_id = worker_id
        self._client_getter = client_getter or (lambda: None)
        self.guard = guard
        self._snapshot = snapshot or self._own_snapshot
        self.host_sampler = host_sampler
        self._clock = clock
        self._owns_writer = writer is None and repository is not None
        if writer is None:
            writer = (
                default_writer()
                if repository is None
                else BackgroundMetricWriter(repository)
            )
        self.writer = writer
        self.lag_monitor = lag_monitor
        self._wait = wait
        self.ticks = 0
        self.last_snapshot: dict[str, Any] | None = None

    def sample(self) -> dict[str, Any]:
        """Take one snapshot, write its row to both sinks, and write the host row."""
        from metrics.snapshot import cache_sizes_row

        lag = None if self.lag_monitor is None else self.lag_monitor.take_peak_ms()
        row = cache_sizes_row(self._snapshot(), loop_lag=lag)
        emit_metric("cache_sizes", row, writer=self.writer)
        self._sample_host()
        self.last_snapshot = row
        return row

    def _own_snapshot(self) -> WorkerSnapshot:
        from caches.operations.snapshot import build_worker_snapshot
        from caches.operations.worker import WorkerContext

        context = WorkerContext(
            worker_id=self.worker_id, client_getter=self._client_getter
        )
        return build_worker_snapshot(context=context, guard=self.guard)

    def _sample_host(self) -> None:
        if self.host_sampler is None:
            return
        host = self.host_sampler.sample(self._clock())
        if host is not None:
            # No log twin: the OOM observer already logs these every 15 s.
            self.writer.submit("host_memory", {"worker_id": self.worker_id, **host})

    def step_after(self, elapsed: float) -> float:
        """Return the wait before the next sample, ``elapsed`` seconds after start."""
        if elapsed < self.startup_period_seconds:
            return self.startup_interval_seconds
        return self.interval_seconds

    async def run(self, stop: asyncio.Event) -> None:
        """Sample at start, often during start-up, then every interval until ``stop``."""
        started = next_at = self._clock()

        def next_delay() -> float:
            nonlocal next_at
            step = self.step_after(next_at - started)
            next_at += step
            now = self._clock()
            if next_at <= now:  # fell behind (a stall): skip, don't burst
                next_at = now + step
            return next_at - now

        try:
            await run_periodically(
                self._tick,
                every=next_delay,
                stop=stop,
                name="cache metrics sample",
                wait=self._wait,
            )
        finally:
            if self._owns_writer:
                self.writer.close()

    def _tick(self) -> None:
        self.ticks += 1
        try:
            self.sample()
        except Exception:  # one bad sample must not end the series
            logger.exception("cache metrics sample failed")
