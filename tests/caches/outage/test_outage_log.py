"""The outage log: a start line, one summary per error per interval, an end line."""

from __future__ import annotations

import logging

import pytest

from caches.core import FakeClock
from caches.outage_log import MAX_DISTINCT_ERRORS, STACK_REPEAT_SECONDS, OutageLog

LOGGER = "tests.caches.outage"
INTERVAL = 10.0


class Refused(ConnectionError):
    """Stands for a driver error."""


def raised(exc: BaseException) -> BaseException:
    """Return `exc` with a traceback, as a layer would catch it."""
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001
        return caught


@pytest.fixture
def log(fake_clock: FakeClock) -> OutageLog:
    return OutageLog(
        "database",
        logger=logging.getLogger(LOGGER),
        interval=INTERVAL,
        clock=fake_clock,
    )


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)


def written(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Return the messages the outage log has written so far."""
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_failures_within_an_interval_write_one_line_with_their_count(
    log: OutageLog, caplog: pytest.LogCaptureFixture, fake_clock: FakeClock
) -> None:
    error = raised(Refused("connection refused"))
    for second in range(100):
        log.failure("user" if second % 2 else "tomori_state", error)
        fake_clock.advance(INTERVAL / 100 * 0.99)
    assert len(written(caplog)) == 1 and "database outage started" in written(caplog)[0]

    fake_clock.advance(INTERVAL)
    assert log.flush() == 1
    summary = written(caplog)[1]
    assert "99 more failures" in summary and "Refused: connection refused" in summary
    assert "user 50" in summary and "tomori_state 49" in summary
    assert log.flush() == 0  # nothing new since


def test_outage_start_and_end_are_logged_with_its_length_and_count(
    log: OutageLog, caplog: pytest.LogCaptureFixture, fake_clock: FakeClock
) -> None:
    assert not log.active
    log.success()  # no outage: nothing to say
    assert len(written(caplog)) == 0

    for _ in range(7):
        log.failure("user", raised(Refused("connection refused")))
    fake_clock.advance(15.0)
    log.success()

    start, end = written(caplog)
    assert start.startswith("database outage started: user: Refused")
    assert end.startswith("database outage ended after 15.0 s: 7 failures")
    assert not log.active and log.outages == 1


def test_a_stack_is_shown_once_per_distinct_error(
    log: OutageLog, caplog: pytest.LogCaptureFixture, fake_clock: FakeClock
) -> None:
    for _ in range(20):
        log.failure("user", raised(Refused("connection refused")))
        log.failure("user", raised(TimeoutError("database call over 3.0 s")))
    first, second = written(caplog)
    assert "Refused: connection refused" in first and "in raised" in first
    assert "new error" in second and "TimeoutError" in second and "in raised" in second

    log.success()
    fake_clock.advance(60.0)
    log.failure("user", raised(Refused("connection refused")))  # a second outage
    assert "in raised" not in written(caplog)[-1]  # its stack was shown an hour ago

    log.success()
    fake_clock.advance(STACK_REPEAT_SECONDS)
    log.failure("user", raised(Refused("connection refused")))
    assert "in raised" in written(caplog)[-1]


def test_the_stack_leaves_out_the_chained_cause(
    log: OutageLog, caplog: pytest.LogCaptureFixture
) -> None:
    def driver() -> None:
        raise Refused("server closed the connection")

    def wrapper() -> None:
        try:
            driver()
        except Refused as exc:  # re-raised with the driver's frames, as Django does
            wrapped = RuntimeError("server closed the connection")
            raise wrapped.with_traceback(exc.__traceback__) from exc

    try:
        wrapper()
    except RuntimeError as exc:
        log.failure("user", exc)
    (line,) = written(caplog)
    assert "in wrapper" in line and "in driver" in line
    assert line.count("in driver") == 1  # the cause's stack is not printed again


def test_errors_past_the_distinct_limit_are_counted_together(
    log: OutageLog, caplog: pytest.LogCaptureFixture, fake_clock: FakeClock
) -> None:
    for number in range(MAX_DISTINCT_ERRORS + 5):
        log.failure("user", raised(Refused(f"error number {number}")))
    assert len(written(caplog)) == MAX_DISTINCT_ERRORS + 1  # each new one, then "other"
    fake_clock.advance(INTERVAL)
    log.flush()
    assert (
        "4 more failures" in written(caplog)[-1]
        and "other errors" in written(caplog)[-1]
    )
