"""Single flight: concurrent callers of one key share one run (no Django here).

Every shared load in the project goes through ``SingleFlight``: the core's
``get_or_load``, short-term memory hydration, the LLM warm, the emoji sync
check and the catalog refresh. A run is a task of its own; callers await it
through ``asyncio.shield``, so a cancelled caller cancels only itself. A run
can be *detached* (``detach``/``detach_where``/``detach_all``): it is marked
stale, its callers still get its result, and later callers start a fresh run
instead of joining it. A run left pending on another (or a closed) event loop
is never joined: the caller starts its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterable
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

#: The flight whose task is running (see ``current_flight``).
_current: ContextVar[Flight[Any] | None] = ContextVar("current_flight", default=None)


class Flight(Generic[T]):
    """One shared run: its task, whether it went stale, and keys touched meanwhile."""

    __slots__ = ("task", "stale", "_touched")

    def __init__(self) -> None:
        self.task: asyncio.Task[T] | None = None
        # Set when the run is detached: its result still reaches its callers,
        # but must not be stored over newer information.
        self.stale = False
        # Keys written live during the run (STM hydration), made on first use:
        # most runs touch nothing and should not allocate for it.
        self._touched: set[Any] | None = None

    def joinable(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Tell whether a caller on ``loop`` can still wait for this run."""
        task = self.task
        return task is not None and not task.done() and task.get_loop() is loop

    def touch(self, key: Any) -> None:
        """Note that ``key`` was written live while this run was going."""
        if self._touched is None:
            self._touched = set()
        self._touched.add(key)

    def was_touched(self, key: Any) -> bool:
        """Tell whether ``key`` was written live while this run was going."""
        return self._touched is not None and key in self._touched

    async def wait(self) -> T:
        """Return the run's result; cancelling the caller does not cancel the run."""
        assert self.task is not None
        return await asyncio.shield(self.task)


def current_flight() -> Flight[Any] | None:
    """Return the flight running the calling task (inside a ``SingleFlight`` run)."""
    return _current.get()


class SingleFlight(Generic[K, T]):
    """Concurrent callers of one key share one run of ``fn(flight)``.

    ``flights`` is the live map of key to running flight; owners on a hot
    path test it directly (an empty dict is falsy).
    """

    __slots__ = ("name", "flights")

    def __init__(self, name: str) -> None:
        self.name = name
        self.flights: dict[K, Flight[T]] = {}

    def __len__(self) -> int:
        return len(self.flights)

    def __contains__(self, key: object) -> bool:
        return key in self.flights

    def joinable(
        self, key: K, loop: asyncio.AbstractEventLoop | None = None
    ) -> Flight[T] | None:
        """Return the run of ``key`` a caller on ``loop`` (default: the running
        one) can join, or None."""
        flight = self.flights.get(key)
        if flight is None:
            return None
        return flight if flight.joinable(loop or asyncio.get_running_loop()) else None

    def start(
        self,
        key: K,
        fn: Callable[[Flight[T]], Awaitable[T]],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> Flight[T]:
        """Start a run of ``fn(flight)`` for ``key`` on ``loop`` (default: the
        running one), replacing any run it cannot join."""
        flight: Flight[T] = Flight()
        self.flights[key] = flight
        flight.task = (loop or asyncio.get_running_loop()).create_task(
            self._run(key, flight, fn), name=self.name
        )
        return flight

    async def run(self, key: K, fn: Callable[[Flight[T]], Awaitable[T]]) -> T:
        """Join the run of ``key``, starting ``fn(flight)`` if none is joinable."""
        flight = self.joinable(key)
        if flight is None:
            flight = self.start(key, fn)
        return await flight.wait()

    def hold(self, key: K) -> Flight[T] | None:
        """Hold a flight of ``key`` with no run (None if one is running or held).

        For a load of many keys at once (``BoundedTTLCache.reserve``): a
        held flight is detached like any other, nobody can join it, and a
        caller that finds it starts a run of its own, which replaces it.
        """
        if key in self.flights:
            return None
        flight: Flight[T] = Flight()
        self.flights[key] = flight
        return flight

    def release(self, key: K, flight: Flight[T]) -> bool:
        """Let go of a held ``flight``; return whether it is still current.

        Current: neither detached nor replaced by a run started meanwhile.
        """
        if self.flights.get(key) is not flight:
            return False
        del self.flights[key]
        return not flight.stale

    def detach(self, key: K) -> Flight[T] | None:
        """Mark the run of ``key`` stale and let later callers start afresh."""
        flight = self.flights.pop(key, None)
        if flight is not None:
            flight.stale = True
        return flight

    def detach_many(self, keys: Iterable[K]) -> int:
        """Detach the runs of ``keys``; return how many were running."""
        return sum(self.detach(key) is not None for key in list(keys))

    def detach_where(self, predicate: Callable[[K], bool]) -> int:
        """Detach every run whose key matches ``predicate``; return how many."""
        return self.detach_many([key for key in self.flights if predicate(key)])

    def detach_all(self) -> int:
        """Detach every run; return how many."""
        return self.detach_many(self.flights)

    async def _run(
        self, key: K, flight: Flight[T], fn: Callable[[Flight[T]], Awaitable[T]]
    ) -> T:
        _current.set(flight)  # the task runs in a copy of the context
        try:
            return await fn(flight)
        finally:
            if self.flights.get(key) is flight:
                del self.flights[key]
