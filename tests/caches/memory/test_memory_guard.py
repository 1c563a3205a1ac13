"""Memory guard states, emergency handlers, cooldown, metrics, logs and monitor."""

from __future__ import annotations

import asyncio
import logging

import pytest

from caches.memory import MIB
from caches.memory import guard as memory_guard
from caches.memory.guard import (
    MemoryGuard,
    MemoryState,
    current_state,
    run_memory_monitor,
    set_current_guard,
)

LIMIT = 1000 * MIB


class FakeRss:
    """An RSS source returning a settable value (None or an exception on demand)."""

    def __init__(self, mb: float = 100) -> None:
        self.value: int | None = int(mb * MIB)
        self.error: Exception | None = None
        self.calls = 0

    def set_mb(self, mb: float) -> None:
        self.value = int(mb * MIB)

    def __call__(self) -> int | None:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.value


class Recorder:
    """Collect emergency handler runs, gc collections and metrics in call order."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.metrics: list[tuple[str, dict]] = []

    def handler(self, name: str):
        return lambda: self.events.append(name)

    def collect(self) -> int:
        self.events.append("collect")
        return 0

    def metric(self, name: str, fields: dict) -> None:
        self.metrics.append((name, fields))


@pytest.fixture
def rss() -> FakeRss:
    return FakeRss()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def guard(rss: FakeRss, recorder: Recorder, fake_clock) -> MemoryGuard:
    built = MemoryGuard(
        limit_bytes=LIMIT,
        warning_threshold=0.8,
        critical_threshold=0.9,
        cooldown_seconds=60,
        rss_source=rss,
        clock=fake_clock,
        collect=recorder.collect,
        on_metric=recorder.metric,
    )
    built.add_emergency_handler("caches", recorder.handler("caches"))
    built.add_emergency_handler("discord", recorder.handler("discord"))
    return built


def test_low_rss_is_safe(guard: MemoryGuard) -> None:
    assert guard.check() is MemoryState.SAFE
    assert guard.last_sample is not None
    assert guard.last_sample.fraction == pytest.approx(0.1)


def test_crossing_warning_threshold_enters_warning(
    guard: MemoryGuard, rss: FakeRss, recorder: Recorder
) -> None:
    rss.set_mb(800)
    assert guard.check() is MemoryState.WARNING
    assert guard.state is MemoryState.WARNING
    assert recorder.events == []


def test_entering_critical_runs_handlers_then_collect_once(
    guard: MemoryGuard, rss: FakeRss, recorder: Recorder, fake_clock
) -> None:
    rss.set_mb(950)
    assert guard.check() is MemoryState.CRITICAL
    fake_clock.advance(10)
    assert guard.check() is MemoryState.CRITICAL
    assert recorder.events == ["caches", "discord", "collect"]
    assert guard.emergencies == 1


def test_critical_is_held_during_cooldown_even_if_rss_drops(
    guard: MemoryGuard, rss: FakeRss, recorder: Recorder, fake_clock
) -> None:
    rss.set_mb(950)
    guard.check()
    rss.set_mb(100)
    fake_clock.advance(59.9)
    assert guard.check() is MemoryState.CRITICAL
    assert guard.last_sample is not None and guard.last_sample.fraction < 0.2
    assert recorder.events == ["caches", "discord", "collect"]


def test_after_cooldown_state_is_re_evaluated(
    guard: MemoryGuard, rss: FakeRss, fake_clock
) -> None:
    rss.set_mb(950)
    guard.check()
    fake_clock.advance(60)
    rss.set_mb(850)
    assert guard.check() is MemoryState.WARNING
    rss.set_mb(100)
    assert guard.check() is MemoryState.SAFE


def test_still_critical_after_cooldown_runs_handlers_again(
    guard: MemoryGuard, rss: FakeRss, recorder: Recorder, fake_clock
) -> None:
    rss.set_mb(950)
    guard.check()
    fake_clock.advance(60)
    assert guard.check() is MemoryState.CRITICAL
    assert recorder.events == ["caches", "discord", "collect"] * 2
    assert guard.emergencies == 2


def test_re_entering_critical_after_recovery_runs_handlers_again(
    guard: MemoryGuard, rss: FakeRss, recorder: Recorder, fake_clock
) -> None:
    rss.set_mb(950)
    guard.check()
    fake_clock.advance(61)
    rss.set_mb(100)
    guard.check()
    rss.set_mb(990)
    assert guard.check() is MemoryState.CRITICAL
    assert recorder.events.count("collect") == 2


def test_failing_handler_is_isolated_and_recorded(
    guard: MemoryGuard,
    rss: FakeRss,
    recorder: Recorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> None:
        raise RuntimeError("boom")

    guard.remove_emergency_handler("discord")
    guard.add_emergency_handler("broken", broken)
    guard.add_emergency_handler("discord", recorder.handler("discord"))
    rss.set_mb(950)
    guard.check()
    assert recorder.events == ["caches", "discord", "collect"]
    assert guard.handler_failures == {"broken": 1}
    assert guard.status()["handler_failures"] == {"broken": 1}
    assert "'broken' failed" in caplog.text


def test_duplicate_handler_name_is_rejected(guard: MemoryGuard) -> None:
    with pytest.raises(ValueError, match="caches"):
        guard.add_emergency_handler("caches", lambda: None)


def test_emergency_metric_carries_memory_figures(
    guard: MemoryGuard, rss: FakeRss, recorder: Recorder
) -> None:
    rss.set_mb(950)
    guard.check()
    assert recorder.metrics == [
        (
            "memory_emergency_entered",
            {
                "rss_mb": 950.0,
                "percent": 95.0,
                "limit_mb": 1000.0,
                "cooldown_ms": 60000,
                "threshold": 90.0,
            },
        )
    ]


def test_failing_metric_sink_does_not_stop_handlers(
    rss: FakeRss, recorder: Recorder, fake_clock
) -> None:
    def broken_sink(name: str, fields: dict) -> None:
        raise OSError("log sink down")

    guard = MemoryGuard(
        limit_bytes=LIMIT,
        warning_threshold=0.8,
        critical_threshold=0.9,
        cooldown_seconds=60,
        rss_source=rss,
        clock=fake_clock,
        collect=recorder.collect,
        on_metric=broken_sink,
    )
    guard.add_emergency_handler("caches", recorder.handler("caches"))
    rss.set_mb(950)
    assert guard.check() is MemoryState.CRITICAL
    assert recorder.events == ["caches", "collect"]


def test_logs_only_on_state_changes(
    guard: MemoryGuard,
    rss: FakeRss,
    fake_clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="caches.memory.guard")
    for mb in (100, 100, 850, 850, 860, 950):
        rss.set_mb(mb)
        guard.check()
    for _ in range(3):  # inside the cooldown: pinned, silent
        fake_clock.advance(10)
        guard.check()
    fake_clock.advance(60)
    rss.set_mb(100)
    guard.check()
    guard.check()
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 3
    assert messages[0].startswith("memory state safe -> warning")
    assert messages[1].startswith("memory emergency #1")
    assert messages[2].startswith("memory state critical -> safe")


@pytest.mark.parametrize("failure", ["none", "raises"])
def test_unreadable_rss_keeps_state_and_logs_once(
    guard: MemoryGuard,
    rss: FakeRss,
    recorder: Recorder,
    caplog: pytest.LogCaptureFixture,
    failure: str,
) -> None:
    rss.set_mb(850)
    guard.check()
    caplog.clear()
    if failure == "none":
        rss.value = None
    else:
        rss.error = OSError("statm gone")
    for _ in range(3):
        assert guard.check() is MemoryState.WARNING
    assert len(caplog.records) == 1
    assert "unreadable" in caplog.records[0].getMessage()
    assert recorder.events == []


def test_status_snapshot(guard: MemoryGuard, rss: FakeRss, fake_clock) -> None:
    assert guard.status()["rss_mb"] is None
    rss.set_mb(950)
    guard.check()
    status = guard.status()
    assert status["state"] == "critical"
    assert status["rss_mb"] == 950.0
    assert status["limit_mb"] == 1000.0
    assert status["percent"] == 95.0
    assert status["emergencies"] == 1
    assert status["last_emergency_at"] == fake_clock.now
    assert status["handler_failures"] == {}


@pytest.mark.parametrize(
    ("limit", "warning", "critical"), [(0, 0.8, 0.9), (LIMIT, 0.9, 0.8)]
)
def test_invalid_configuration_is_rejected(
    limit: int, warning: float, critical: float
) -> None:
    with pytest.raises(ValueError):
        MemoryGuard(
            limit_bytes=limit,
            warning_threshold=warning,
            critical_threshold=critical,
            cooldown_seconds=60,
        )


def test_current_state_follows_the_installed_guard(
    guard: MemoryGuard, rss: FakeRss, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_guard, "_current_guard", None)
    assert current_state() is MemoryState.SAFE
    set_current_guard(guard)
    rss.set_mb(950)
    guard.check()
    assert current_state() is MemoryState.CRITICAL
    set_current_guard(None)
    assert current_state() is MemoryState.SAFE


def test_state_listeners_hear_each_change_once(
    guard: MemoryGuard, rss: FakeRss, fake_clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_guard, "_state_listeners", [])
    heard: list[MemoryState] = []

    def broken(state: MemoryState) -> None:
        raise RuntimeError("listener bug")

    memory_guard.add_state_listener(broken)  # must not break the guard
    memory_guard.add_state_listener(heard.append)
    memory_guard.add_state_listener(heard.append)  # added once only
    guard.check()  # still safe: no change
    rss.set_mb(850)
    guard.check()
    rss.set_mb(950)
    guard.check()
    fake_clock.advance(61)
    guard.check()  # critical again after the cooldown: no new change
    fake_clock.advance(61)
    rss.set_mb(100)
    guard.check()
    assert heard == [MemoryState.WARNING, MemoryState.CRITICAL, MemoryState.SAFE]
    memory_guard.remove_state_listener(heard.append)
    rss.set_mb(850)
    guard.check()
    assert len(heard) == 3


async def test_monitor_checks_until_stop_is_set(guard: MemoryGuard) -> None:
    stop = asyncio.Event()
    calls = 0
    original_check = guard.check

    def counting_check() -> MemoryState:
        nonlocal calls
        calls += 1
        if calls == 3:
            stop.set()
        return original_check()

    guard.check = counting_check  # type: ignore[method-assign]
    await asyncio.wait_for(
        run_memory_monitor(guard, interval_seconds=0, stop=stop), timeout=5
    )
    assert calls == 3


async def test_monitor_stops_promptly_mid_interval(guard: MemoryGuard) -> None:
    stop = asyncio.Event()
    checked = asyncio.Event()
    original_check = guard.check

    def signalling_check() -> MemoryState:
        checked.set()
        return original_check()

    guard.check = signalling_check  # type: ignore[method-assign]
    task = asyncio.create_task(
        run_memory_monitor(guard, interval_seconds=3600, stop=stop)
    )
    await asyncio.wait_for(checked.wait(), timeout=5)
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    assert task.done() and task.exception() is None


async def test_monitor_survives_a_failing_check(guard: MemoryGuard) -> None:
    stop = asyncio.Event()
    calls = 0

    def failing_check() -> MemoryState:
        nonlocal calls
        calls += 1
        if calls == 2:
            stop.set()
        raise RuntimeError("bad check")

    guard.check = failing_check  # type: ignore[method-assign]
    await asyncio.wait_for(
        run_memory_monitor(guard, interval_seconds=0, stop=stop), timeout=5
    )
    assert calls == 2
