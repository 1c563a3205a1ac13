"""SingleFlight: one shared run per key, errors to every caller, detach, cancellation."""

from __future__ import annotations

import asyncio

import pytest

from caches.core import Flight, SingleFlight, current_flight


class Gate:
    """A run that counts its calls and finishes when released."""

    def __init__(self, value: str = "v") -> None:
        self.calls = 0
        self.value = value
        self.release = asyncio.Event()
        self.error: Exception | None = None

    async def __call__(self, flight: Flight[str]) -> str:
        self.calls += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return self.value


async def test_concurrent_callers_of_one_key_share_one_run() -> None:
    flights: SingleFlight[str, str] = SingleFlight("test")
    gate = Gate()
    callers = [asyncio.create_task(flights.run("k", gate)) for _ in range(5)]
    await asyncio.sleep(0)
    assert len(flights) == 1 and "k" in flights
    gate.release.set()
    assert await asyncio.gather(*callers) == ["v"] * 5
    assert gate.calls == 1 and len(flights) == 0


async def test_different_keys_run_apart() -> None:
    flights: SingleFlight[str, str] = SingleFlight("test")
    gate = Gate()
    gate.release.set()
    assert await asyncio.gather(flights.run("a", gate), flights.run("b", gate)) == [
        "v",
        "v",
    ]
    assert gate.calls == 2


async def test_an_error_reaches_every_caller_and_the_next_call_runs_again() -> None:
    flights: SingleFlight[str, str] = SingleFlight("test")
    gate = Gate()
    gate.error = LookupError("down")
    callers = [asyncio.create_task(flights.run("k", gate)) for _ in range(3)]
    await asyncio.sleep(0)
    gate.release.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(result, LookupError) for result in results)
    gate.error = None
    assert await flights.run("k", gate) == "v" and gate.calls == 2


async def test_a_cancelled_caller_cancels_only_itself() -> None:
    flights: SingleFlight[str, str] = SingleFlight("test")
    gate = Gate()
    first = asyncio.create_task(flights.run("k", gate))
    second = asyncio.create_task(flights.run("k", gate))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    gate.release.set()
    assert await second == "v"
    with pytest.raises(asyncio.CancelledError):
        await first
    assert gate.calls == 1


async def test_a_detached_run_is_stale_and_later_callers_start_afresh() -> None:
    flights: SingleFlight[str, str] = SingleFlight("test")
    old, new = Gate("old"), Gate("new")
    early = asyncio.create_task(flights.run("k", old))
    await asyncio.sleep(0)
    detached = flights.detach("k")
    assert detached is not None and detached.stale and "k" not in flights
    late = asyncio.create_task(flights.run("k", new))
    await asyncio.sleep(0)
    old.release.set()
    new.release.set()
    assert (await early, await late) == ("old", "new")
    assert flights.detach("k") is None


async def test_detach_where_and_all_count_the_runs_they_stale() -> None:
    flights: SingleFlight[int, str] = SingleFlight("test")
    gate = Gate()
    runs = [asyncio.create_task(flights.run(key, gate)) for key in range(4)]
    await asyncio.sleep(0)
    assert flights.detach_where(lambda key: key % 2 == 0) == 2
    assert sorted(flights.flights) == [1, 3]
    assert flights.detach_all() == 2 and len(flights) == 0
    gate.release.set()
    await asyncio.gather(*runs)


async def test_the_run_sees_its_own_flight() -> None:
    flights: SingleFlight[str, bool] = SingleFlight("test")

    async def run(flight: Flight[bool]) -> bool:
        return current_flight() is flight

    assert await flights.run("k", run) is True
    assert current_flight() is None


def test_a_run_pending_on_another_loop_is_never_joined() -> None:
    flights: SingleFlight[str, str] = SingleFlight("test")
    stuck = Gate("stuck")

    async def leave_pending() -> Flight[str]:
        return flights.start("k", stuck)

    other = asyncio.new_event_loop()
    try:
        pending = other.run_until_complete(leave_pending())
        fresh = Gate("fresh")
        fresh.release.set()
        assert asyncio.run(flights.run("k", fresh)) == "fresh"
        assert stuck.calls == 1 and fresh.calls == 1
    finally:
        assert pending.task is not None
        pending.task.cancel()
        other.run_until_complete(asyncio.gather(pending.task, return_exceptions=True))
        other.close()
