"""A worker's last minute: messages per second and turn p99 from the counters it keeps."""

from __future__ import annotations

import pytest

from caches.core import FakeClock
from caches.core.buckets import BucketCounts, bucket_quantile
from metrics.prometheus.buckets import TURN_BUCKETS, TurnTimings
from metrics.traffic import TrafficWindow, merged_counts

BOUNDS = (0.001, 0.01, 0.1)  # and +Inf


def test_the_quantile_interpolates_within_its_bucket_as_prometheus_does() -> None:
    # 100 observations: 50 up to 1 ms, 49 up to 10 ms, 1 up to 100 ms.
    counts = [50, 49, 1, 0]
    # Rank 99 falls at the end of the second bucket: its upper bound.
    assert bucket_quantile(0.99, BOUNDS, counts) == pytest.approx(0.01)
    # Rank 50 is the end of the first: 1 ms; rank 25 is halfway into it.
    assert bucket_quantile(0.5, BOUNDS, counts) == pytest.approx(0.001)
    assert bucket_quantile(0.25, BOUNDS, counts) == pytest.approx(0.0005)
    # Rank 74.5 is 24.5/49 of the way through the 1-10 ms bucket.
    assert bucket_quantile(0.745, BOUNDS, counts) == pytest.approx(0.0055)


def test_the_quantile_of_nothing_is_none_and_past_the_last_bound_is_it() -> None:
    assert bucket_quantile(0.99, BOUNDS, [0, 0, 0, 0]) is None
    assert bucket_quantile(0.99, BOUNDS, [1, 0, 0, 99]) == 0.1


def _buckets(*latencies: float) -> tuple[int, ...]:
    timings = TurnTimings(BOUNDS)
    for seconds in latencies:
        timings.observe("ok", seconds)
    return merged_counts(timings.by_outcome.values(), len(BOUNDS) + 1)


def test_histograms_of_several_outcomes_are_summed_per_bucket() -> None:
    timings = TurnTimings(BOUNDS)
    timings.observe("ok", 0.0005)
    timings.observe("ok", 0.05)
    timings.observe("error", 0.05)
    assert merged_counts(timings.by_outcome.values(), 4) == (1, 0, 2, 0)
    assert merged_counts([], 4) == (0, 0, 0, 0)


def test_the_first_sample_has_no_span_to_measure() -> None:
    window = TrafficWindow(BOUNDS, clock=FakeClock())
    figures = window.sample(messages=500, buckets=_buckets(0.05))
    assert figures.window_seconds == 0 and figures.messages_per_second is None
    assert figures.turns == 0 and figures.turn_p99_ms is None


def test_figures_cover_the_last_minute_only() -> None:
    clock = FakeClock()
    window = TrafficWindow(BOUNDS, clock=clock)
    window.sample(messages=0, buckets=_buckets())
    clock.advance(30)
    # A slow burst in the first half minute, then only fast turns.
    slow = _buckets(*[0.05] * 10)
    window.sample(messages=300, buckets=slow)
    clock.advance(30)
    figures = window.sample(messages=600, buckets=slow)
    assert figures.window_seconds == 60 and figures.messages_per_second == 10.0
    assert figures.turns == 10 and figures.turn_p99_ms == pytest.approx(99.1)
    clock.advance(30)  # the burst is now more than a minute old
    fast = tuple(a + b for a, b in zip(slow, _buckets(*[0.0005] * 20), strict=True))
    figures = window.sample(messages=1200, buckets=fast)
    assert figures.window_seconds == 60 and figures.messages_per_second == 15.0
    assert figures.turns == 20 and figures.turn_p99_ms == pytest.approx(0.99)


def test_an_idle_minute_reports_no_turns_not_a_latency() -> None:
    clock = FakeClock()
    window = TrafficWindow(BOUNDS, clock=clock)
    busy = _buckets(0.05)
    window.sample(messages=10, buckets=busy)
    clock.advance(60)
    figures = window.sample(messages=10, buckets=busy)
    assert figures.messages_per_second == 0.0
    assert figures.turns == 0 and figures.turn_p99_ms is None


def test_the_window_keeps_a_bounded_number_of_samples() -> None:
    clock = FakeClock()
    window = TrafficWindow(TURN_BUCKETS, clock=clock)
    empty = (0,) * (len(TURN_BUCKETS) + 1)
    for n in range(1000):  # a snapshot every 2 s for half an hour
        window.sample(messages=n, buckets=empty)
        clock.advance(2)
    assert len(window._samples) <= 31


def test_bucket_counts_and_the_quantile_agree_on_one_observation() -> None:
    counts = BucketCounts(BOUNDS)
    counts.observe(0.004)
    assert bucket_quantile(0.99, BOUNDS, counts.counts) == pytest.approx(0.00991)
