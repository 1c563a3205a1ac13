"""A circuit breaker: after a failure, refuse calls for a while, then let one probe through."""

from __future__ import annotations

import time

from caches.core.clock import Clock

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"


class CircuitBreaker:
    """Closed: every call goes. Open: calls are refused for `open_seconds`.

    After the interval one call goes through as a probe (half open) while the
    rest are still refused; the probe's answer closes the breaker, its failure
    opens it again. A probe that ends with neither (cancelled) lets the next
    caller probe.
    """

    __slots__ = ("open_seconds", "clock", "_state", "_until", "trips", "refused")

    def __init__(self, *, open_seconds: float, clock: Clock = time.monotonic) -> None:
        self.open_seconds = open_seconds
        self.clock = clock
        self._state = CLOSED
        self._until = 0.0
        self.trips = 0
        self.refused = 0

    @property
    def state(self) -> str:
        """Return "closed", "open" or "half_open"."""
        return self._state

    def allow(self) -> bool:
        """Tell whether a call may go now (the first after the interval is the probe)."""
        if self._state == CLOSED:
            return True
        if self._state == OPEN and self.clock() >= self._until:
            self._state = HALF_OPEN
            return True
        self.refused += 1
        return False

    def succeeded(self) -> None:
        """Note a call that was answered: close the breaker."""
        self._state = CLOSED

    def failed(self) -> None:
        """Note a call that got no answer: refuse calls for `open_seconds` (a trip if closed)."""
        if self._state == CLOSED:
            self.trips += 1
        self._state = OPEN
        self._until = self.clock() + self.open_seconds

    def abandoned(self) -> None:
        """Note a probe that ended without a verdict: the next caller probes."""
        if self._state == HALF_OPEN:
            self._state = OPEN
            self._until = self.clock()
