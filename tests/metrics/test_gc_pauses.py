"""Cyclic GC pauses: timed per generation from gc.callbacks, exported as a histogram."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry, generate_latest

from metrics.prometheus.gc_pauses import GcPauseCollector, GcPauses


def test_each_collection_is_timed_in_its_generation() -> None:
    ticks = iter([10.0, 10.0004, 20.0, 20.3])
    pauses = GcPauses(clock=lambda: next(ticks))

    pauses.callback("start", {"generation": 0})
    pauses.callback("stop", {"generation": 0})
    pauses.callback("start", {"generation": 2})
    pauses.callback("stop", {"generation": 2})

    young, _, full = pauses.by_generation
    assert dict(young.cumulative()[0])["0.00025"] == 0
    assert dict(young.cumulative()[0])["0.0005"] == 1
    assert dict(full.cumulative()[0])["0.25"] == 0
    assert dict(full.cumulative()[0])["0.5"] == 1
    assert abs(full.total - 0.3) < 1e-9


def test_real_collections_reach_the_histogram_once_per_collection() -> None:
    pauses = GcPauses()
    registry = CollectorRegistry()
    registry.register(GcPauseCollector(pauses))
    GcPauseCollector(pauses)  # installing twice times each collection once
    enabled = gc.isenabled()
    gc.disable()  # only the two collections asked for
    try:
        gc.collect()
        gc.collect(0)
    finally:
        gc.callbacks.remove(pauses.callback)
        if enabled:
            gc.enable()
    text = generate_latest(registry).decode()
    assert 'tomori_gc_pause_seconds_count{generation="2"} 1.0' in text
    assert 'tomori_gc_pause_seconds_count{generation="0"} 1.0' in text
    assert 'tomori_gc_pause_seconds_count{generation="1"} 0.0' in text
