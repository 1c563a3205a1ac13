"""The circuit breaker: refuse for an interval after a failure, then one probe at a time."""

from __future__ import annotations

from caches.core import FakeClock
from caches.core.breaker import CircuitBreaker


def test_a_failure_refuses_calls_until_the_interval_passes_then_one_probe_goes(
    fake_clock: FakeClock,
) -> None:
    breaker = CircuitBreaker(open_seconds=2.0, clock=fake_clock)
    assert breaker.allow() and breaker.state == "closed"
    breaker.failed()
    assert not breaker.allow()
    fake_clock.advance(1.9)
    assert not breaker.allow()
    fake_clock.advance(0.1)
    assert breaker.allow() and breaker.state == "half_open"  # the probe
    assert not breaker.allow()  # one probe at a time
    breaker.failed()
    assert breaker.state == "open" and not breaker.allow()
    fake_clock.advance(2.0)
    assert breaker.allow()
    breaker.succeeded()
    assert breaker.state == "closed" and breaker.allow()
    assert (breaker.trips, breaker.refused) == (1, 4)


def test_an_abandoned_probe_lets_the_next_caller_probe(fake_clock: FakeClock) -> None:
    breaker = CircuitBreaker(open_seconds=5.0, clock=fake_clock)
    breaker.failed()
    fake_clock.advance(5.0)
    assert breaker.allow()
    breaker.abandoned()  # cancelled: no verdict
    assert breaker.state == "open" and breaker.allow()
