"""The image-work gate: one pipeline at a time, none while memory is critical."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from caches.core import FakeClock
from caches.media import (
    ImageWorkBusyError,
    ImageWorkGate,
    MemoryPressureError,
    image_work_gate,
    image_work_slot,
)
from caches.memory.guard import (
    MemoryGuard,
    MemoryState,
    add_state_listener,
    remove_state_listener,
    set_current_guard,
)


class FakeGuardState:
    """A memory state the test sets by hand, standing in for the guard."""

    def __init__(self) -> None:
        self.state = MemoryState.SAFE

    def __call__(self) -> MemoryState:
        return self.state


@pytest.fixture
def pressure() -> FakeGuardState:
    return FakeGuardState()


@pytest.fixture
def gate(pressure: FakeGuardState) -> ImageWorkGate:
    return ImageWorkGate(state=pressure)


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the loop (no time passes) until `condition()` holds."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def hold(
    gate: ImageWorkGate, release: asyncio.Event, entered: list[str], name: str
) -> None:
    """Take a slot, note it, and keep it until `release` is set."""
    async with gate.slot(timeout=None):
        entered.append(name)
        await release.wait()


async def test_free_gate_admits_at_once(gate: ImageWorkGate) -> None:
    async with gate.slot(timeout=0):
        assert gate.active == 1
    assert gate.status() == {"slots": 1, "active": 0, "waiting": 0, "refused": 0}


async def test_one_pipeline_at_a_time_by_default(gate: ImageWorkGate) -> None:
    release_first, release_second = asyncio.Event(), asyncio.Event()
    entered: list[str] = []
    first = asyncio.create_task(hold(gate, release_first, entered, "first"))
    second = asyncio.create_task(hold(gate, release_second, entered, "second"))
    await until(lambda: gate.waiting == 1)
    assert entered == ["first"] and gate.active == 1
    release_first.set()
    await first
    await until(lambda: entered == ["first", "second"])
    release_second.set()
    await second
    assert gate.active == 0


async def test_more_slots_run_pipelines_side_by_side(pressure: FakeGuardState) -> None:
    gate = ImageWorkGate(slots=2, state=pressure)
    release = asyncio.Event()
    entered: list[str] = []
    tasks = [asyncio.create_task(hold(gate, release, entered, n)) for n in "abc"]
    await until(lambda: gate.waiting == 1)
    assert sorted(entered) == ["a", "b"]
    release.set()
    await asyncio.gather(*tasks)
    assert sorted(entered) == ["a", "b", "c"]


async def test_critical_holds_work_until_pressure_clears(
    gate: ImageWorkGate, pressure: FakeGuardState
) -> None:
    pressure.state = MemoryState.CRITICAL
    release, entered = asyncio.Event(), list[str]()
    release.set()
    task = asyncio.create_task(hold(gate, release, entered, "job"))
    await until(lambda: gate.waiting == 1)
    gate.pressure_changed()  # still critical: the waiter checks and waits again
    await until(lambda: gate.waiting == 1)
    assert entered == []
    pressure.state = MemoryState.WARNING
    gate.pressure_changed()
    await task
    assert entered == ["job"]


async def test_critical_past_the_timeout_raises_memory_pressure_error(
    gate: ImageWorkGate, pressure: FakeGuardState
) -> None:
    pressure.state = MemoryState.CRITICAL
    with pytest.raises(MemoryPressureError, match="critical"):
        async with gate.slot(timeout=0):
            raise AssertionError("image work ran under critical memory")
    assert (gate.active, gate.waiting, gate.refused) == (0, 0, 1)


async def test_busy_slots_past_the_timeout_raise_busy_error(
    gate: ImageWorkGate,
) -> None:
    release, entered = asyncio.Event(), list[str]()
    holder = asyncio.create_task(hold(gate, release, entered, "holder"))
    await until(lambda: entered == ["holder"])
    with pytest.raises(ImageWorkBusyError):
        async with gate.slot(timeout=0):
            raise AssertionError("a second pipeline ran")
    release.set()
    await holder
    assert (gate.active, gate.refused) == (0, 1)


async def test_pressure_returning_while_queued_keeps_waiting(
    gate: ImageWorkGate, pressure: FakeGuardState
) -> None:
    release_holder, release_queued = asyncio.Event(), asyncio.Event()
    entered: list[str] = []
    holder = asyncio.create_task(hold(gate, release_holder, entered, "holder"))
    queued = asyncio.create_task(hold(gate, release_queued, entered, "queued"))
    await until(lambda: gate.waiting == 1)
    pressure.state = MemoryState.CRITICAL
    release_holder.set()
    await holder  # the slot is free, but memory is critical now
    await until(lambda: gate.waiting == 1)
    assert entered == ["holder"]
    pressure.state = MemoryState.SAFE
    gate.pressure_changed()
    release_queued.set()
    await queued
    assert entered == ["holder", "queued"]


async def test_error_in_the_block_frees_the_slot(gate: ImageWorkGate) -> None:
    with pytest.raises(ValueError):
        async with gate.slot(timeout=0):
            raise ValueError("decode failed")
    async with gate.slot(timeout=0):
        assert gate.active == 1


@pytest.fixture
def installed_guard(fake_clock: FakeClock) -> Iterator[tuple[MemoryGuard, list[int]]]:
    """Install a real guard over a settable RSS (in MB) as the process's guard."""
    rss_mb = [100]
    guard = MemoryGuard(
        limit_bytes=1000 * 1024 * 1024,
        warning_threshold=0.8,
        critical_threshold=0.9,
        cooldown_seconds=0,
        rss_source=lambda: rss_mb[0] * 1024 * 1024,
        clock=fake_clock,
        collect=lambda: 0,
    )
    set_current_guard(guard)
    yield guard, rss_mb
    set_current_guard(None)


async def test_guard_transition_wakes_held_work(
    installed_guard: tuple[MemoryGuard, list[int]],
) -> None:
    guard, rss_mb = installed_guard
    gate = ImageWorkGate()  # reads the installed guard's state
    add_state_listener(gate.pressure_changed)
    try:
        rss_mb[0] = 950
        assert guard.check() is MemoryState.CRITICAL
        release, entered = asyncio.Event(), list[str]()
        release.set()
        task = asyncio.create_task(hold(gate, release, entered, "job"))
        await until(lambda: gate.waiting == 1)
        rss_mb[0] = 500
        assert guard.check() is MemoryState.SAFE  # notifies the gate: no polling
        await task
        assert entered == ["job"]
    finally:
        remove_state_listener(gate.pressure_changed)


async def test_image_work_slot_uses_the_process_gate() -> None:
    gate = image_work_gate()
    assert image_work_gate() is gate
    async with image_work_slot(timeout=0):
        assert gate.active == 1
    assert gate.active == 0


def test_gate_needs_a_slot() -> None:
    with pytest.raises(ValueError):
        ImageWorkGate(slots=0)
