"""A bot worker's liveness and readiness, as an orchestrator probes them.

Live: the event loop still runs callbacks (a heartbeat on the loop is fresh).
Ready: live, caches warmed, bus subscribed, every gateway shard connected,
and not shutting down. The probes run on the endpoint's thread and read only
flags and counters, so a wedged loop is reported, not waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from metrics.prometheus.sampled import LoopFigures

#: A heartbeat older than this means the event loop is stuck (the beat runs every second).
LOOP_STALL_SECONDS = 10.0

Verdict = tuple[bool, dict[str, Any]]


class WorkerHealth:
    """Start-up flags, the loop heartbeat and what readiness asks the worker."""

    def __init__(
        self,
        *,
        figures: LoopFigures,
        bus_connected: Callable[[], bool],
        stopping: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.figures = figures
        self._bus_connected = bus_connected
        self._stopping = stopping
        self._clock = clock
        self.last_beat = clock()
        self.caches_warmed = False

    def beat(self) -> None:
        """Note that the event loop ran (call it from the loop)."""
        self.last_beat = self._clock()

    def loop_age(self) -> float:
        """Return the seconds since the loop last beat."""
        return max(self._clock() - self.last_beat, 0.0)

    def liveness(self) -> Verdict:
        """Return (live, body): live unless the event loop stopped running."""
        age = self.loop_age()
        live = age < LOOP_STALL_SECONDS
        body = {"status": "ok" if live else "stalled", "loop_heartbeat_age_s": age}
        return live, body

    def readiness(self) -> Verdict:
        """Return (ready, body) with every check by name."""
        live, _ = self.liveness()
        checks = {
            "event_loop": live,
            "caches_warmed": self.caches_warmed,
            "bus_subscribed": self._safe(self._bus_connected),
            "gateway_connected": self.figures.gateway_connected,
            "not_stopping": not self._safe(self._stopping),
        }
        ready = all(checks.values())
        failing = [name for name, ok in checks.items() if not ok]
        body = {
            "status": "ready" if ready else "not ready",
            "checks": checks,
            "failing": failing,
        }
        return ready, body

    @staticmethod
    def _safe(check: Callable[[], bool]) -> bool:
        try:
            return bool(check())
        except Exception:  # noqa: BLE001 (a probe answers, it does not raise)
            return False
