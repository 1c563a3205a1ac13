"""Memory guard: RSS against the container limit, emergency handlers on critical."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from caches.core.periodic import run_periodically
from caches.memory import MIB
from caches.memory.readers import read_rss_bytes

logger = logging.getLogger(__name__)


class MemoryState(StrEnum):
    """How close process RSS is to the memory limit."""

    SAFE = "safe"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True)
class MemorySample:
    """One RSS reading: bytes, fraction of the limit, and the clock time taken."""

    rss_bytes: int
    fraction: float
    at: float


class MemoryGuard:
    """Classify RSS against a limit; on entering critical, run handlers then collect.

    ``check()`` is synchronous and meant for the event-loop thread, so handlers
    that touch discord.py caches run where those caches live. After an
    emergency the state is held at CRITICAL for ``cooldown_seconds``: handlers
    and the forced collection run at most once per cooldown.
    """

    def __init__(
        self,
        *,
        limit_bytes: int,
        warning_threshold: float,
        critical_threshold: float,
        cooldown_seconds: float,
        rss_source: Callable[[], int | None] = read_rss_bytes,
        clock: Callable[[], float] = time.monotonic,
        collect: Callable[[], object] = gc.collect,
        on_metric: Callable[[str, dict], object] | None = None,
    ) -> None:
        if limit_bytes <= 0:
            raise ValueError(f"limit_bytes must be > 0, got {limit_bytes}")
        if not 0 < warning_threshold <= critical_threshold:
            raise ValueError("need 0 < warning_threshold <= critical_threshold")
        if cooldown_seconds < 0:
            raise ValueError("cooldown_seconds must be >= 0")
        self.limit_bytes = limit_bytes
        self.warning_threshold = warning_threshold
        self.critical_threshold = critical_threshold
        self.cooldown_seconds = cooldown_seconds
        self._rss_source = rss_source
        self._clock = clock
        self._collect = collect
        self._on_metric = on_metric
        self._handlers: dict[str, Callable[[], object]] = {}
        self._state = MemoryState.SAFE
        self._cooldown_until: float | None = None
        self._sample_failing = False
        self.last_sample: MemorySample | None = None
        self.emergencies = 0
        self.last_emergency_at: float | None = None
        self.handler_failures: dict[str, int] = {}

    @property
    def state(self) -> MemoryState:
        """Return the state decided by the latest ``check()``."""
        return self._state

    def add_emergency_handler(self, name: str, fn: Callable[[], object]) -> None:
        """Register a synchronous callable run, in order, on entering critical."""
        if name in self._handlers:
            raise ValueError(f"emergency handler {name!r} is already registered")
        self._handlers[name] = fn

    def remove_emergency_handler(self, name: str) -> None:
        """Unregister an emergency handler; unknown names are ignored."""
        self._handlers.pop(name, None)

    def check(self) -> MemoryState:
        """Sample RSS, update the state, and run the emergency on entering critical."""
        now = self._clock()
        rss = self._read_rss()
        if rss is None:
            return self._state
        fraction = rss / self.limit_bytes
        self.last_sample = MemorySample(rss_bytes=rss, fraction=fraction, at=now)
        if self._cooldown_until is not None and now < self._cooldown_until:
            return self._state
        self._cooldown_until = None
        new_state = self._classify(fraction)
        if new_state is MemoryState.CRITICAL:
            self._enter_emergency(now)
        elif new_state is not self._state:
            self._log_transition(new_state)
            self._state = new_state
            _notify_state_listeners(new_state)
        return self._state

    def status(self) -> dict:
        """Return a JSON-ready snapshot of the guard for metrics and the admin."""
        sample = self.last_sample
        return {
            "state": str(self._state),
            "rss_mb": None if sample is None else round(sample.rss_bytes / MIB, 1),
            "limit_mb": round(self.limit_bytes / MIB, 1),
            "percent": None if sample is None else round(100 * sample.fraction, 1),
            "warning_percent": round(100 * self.warning_threshold, 1),
            "critical_percent": round(100 * self.critical_threshold, 1),
            "emergencies": self.emergencies,
            "last_emergency_at": self.last_emergency_at,
            "handler_failures": dict(self.handler_failures),
        }

    def _read_rss(self) -> int | None:
        try:
            rss = self._rss_source()
        except Exception:
            rss = None
        if rss is None and not self._sample_failing:
            logger.warning(
                "memory guard: RSS unreadable; keeping state %s", self._state
            )
        elif rss is not None and self._sample_failing:
            logger.info("memory guard: RSS readable again")
        self._sample_failing = rss is None
        return rss

    def _classify(self, fraction: float) -> MemoryState:
        if fraction >= self.critical_threshold:
            return MemoryState.CRITICAL
        if fraction >= self.warning_threshold:
            return MemoryState.WARNING
        return MemoryState.SAFE

    def _log_transition(self, new_state: MemoryState) -> None:
        level = logging.WARNING if new_state is MemoryState.WARNING else logging.INFO
        logger.log(
            level,
            "memory state %s -> %s: %s",
            self._state,
            new_state,
            self._describe_sample(),
        )

    def _describe_sample(self) -> str:
        status = self.status()
        return "rss {rss_mb} MB of {limit_mb} MB ({percent}%)".format(**status)

    def _enter_emergency(self, now: float) -> None:
        # Handlers run before the collection so the dropped references are freed.
        entered = self._state is not MemoryState.CRITICAL
        self._state = MemoryState.CRITICAL
        self._cooldown_until = now + self.cooldown_seconds
        self.emergencies += 1
        self.last_emergency_at = now
        logger.warning(
            "memory emergency #%d: %s; running %d handlers",
            self.emergencies,
            self._describe_sample(),
            len(self._handlers),
        )
        self._emit_metric()
        self._run_handlers()
        try:
            self._collect()
        except Exception:
            logger.exception("memory guard: forced collection failed")
        if entered:
            _notify_state_listeners(MemoryState.CRITICAL)

    def _emit_metric(self) -> None:
        if self._on_metric is None:
            return
        status = self.status()
        fields = {
            "rss_mb": status["rss_mb"],
            "percent": status["percent"],
            "limit_mb": status["limit_mb"],
            "cooldown_ms": round(self.cooldown_seconds * 1000),
            "threshold": status["critical_percent"],
        }
        try:
            self._on_metric("memory_emergency_entered", fields)
        except Exception:  # telemetry must never stop the emergency
            logger.exception("memory guard: metric sink failed")

    def _run_handlers(self) -> None:
        for name, handler in list(self._handlers.items()):
            try:
                handler()
            except Exception:
                self.handler_failures[name] = self.handler_failures.get(name, 0) + 1
                logger.exception("memory guard: emergency handler %r failed", name)


async def run_memory_monitor(
    guard: MemoryGuard, *, interval_seconds: float, stop: asyncio.Event
) -> None:
    """Call ``guard.check()`` every interval until ``stop`` is set."""
    await run_periodically(
        guard.check, every=interval_seconds, stop=stop, name="memory monitor"
    )


_current_guard: MemoryGuard | None = None
# Called with the new state whenever any guard changes state or the current
# guard is swapped; they re-read ``current_state()`` (e.g. the image-work gate
# in caches.media, to wake work held back while critical).
_state_listeners: list[Callable[[MemoryState], object]] = []


def add_state_listener(listener: Callable[[MemoryState], object]) -> None:
    """Call ``listener(state)`` on the loop thread at every guard state change."""
    if listener not in _state_listeners:
        _state_listeners.append(listener)


def remove_state_listener(listener: Callable[[MemoryState], object]) -> None:
    """Stop calling ``listener``; unknown listeners are ignored."""
    if listener in _state_listeners:
        _state_listeners.remove(listener)


def _notify_state_listeners(state: MemoryState) -> None:
    for listener in list(_state_listeners):
        try:
            listener(state)
        except Exception:  # a listener must never break the guard's check
            logger.exception("memory guard: state listener failed")


def set_current_guard(guard: MemoryGuard | None) -> None:
    """Make ``guard`` the process's guard (None clears it)."""
    global _current_guard
    _current_guard = guard
    _notify_state_listeners(current_state())


def get_current_guard() -> MemoryGuard | None:
    """Return the process's guard, or None when none is installed."""
    return _current_guard


def current_state() -> MemoryState:
    """Return the current guard's state, SAFE when no guard is installed."""
    return MemoryState.SAFE if _current_guard is None else _current_guard.state
