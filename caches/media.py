"""The image-work gate: image pipelines one at a time, none while memory is critical.

libvips' decoded bitmaps are native memory that no Python cache accounts for
and no emergency clear reclaims (its limits: ``caches.memory.vips``). So every
image pipeline runs inside ``async with image_work_slot():``, which holds new
image work back while the memory guard is critical and runs one pipeline at a
time (see ``ImageWorkGate``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from caches.memory.guard import add_state_listener, current_state

logger = logging.getLogger(__name__)

# Image pipelines run at once. Independent of SHARP_CONCURRENCY, which sets the
# libvips threads inside one pipeline: each pipeline holds its decoded bitmaps,
# so on a small container two at once can double the native peak.
IMAGE_WORK_SLOTS = 1
DEFAULT_IMAGE_WORK_TIMEOUT_SECONDS = 30.0


class ImageWorkRefusedError(RuntimeError):
    """Image work could not start within its timeout."""


class MemoryPressureError(ImageWorkRefusedError):
    """Memory stayed critical for the whole timeout, so image work was refused."""


class ImageWorkBusyError(ImageWorkRefusedError):
    """Every image-work slot stayed taken for the whole timeout."""


def _guard_state() -> str:
    return current_state()


class ImageWorkGate:
    """Admit image pipelines up to ``slots`` at a time, and none while memory is critical.

    Starting a pipeline while the guard is critical would add native memory
    the emergency clear cannot reclaim. Waiters wake on events (a slot
    released, ``pressure_changed()``, which the memory guard calls on every
    state change), never by polling. Like the guard, the gate is confined to
    the event-loop thread.
    """

    def __init__(
        self, *, slots: int = IMAGE_WORK_SLOTS, state: Callable[[], str] = _guard_state
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots = slots
        self._state = state
        self.active = 0
        self.refused = 0
        self._wakeups: list[asyncio.Future[None]] = []

    @property
    def waiting(self) -> int:
        """Return how many callers are waiting to start image work."""
        return len(self._wakeups)

    def under_pressure(self) -> bool:
        """Tell whether the memory guard is critical (MemoryState is a StrEnum)."""
        return self._state() == "critical"

    def pressure_changed(self, _state: object = None) -> None:
        """Wake every waiter to re-check the memory state (a guard state listener)."""
        self._wake_all()

    @contextlib.asynccontextmanager
    async def slot(
        self, timeout: float | None = DEFAULT_IMAGE_WORK_TIMEOUT_SECONDS
    ) -> AsyncIterator[None]:
        """Hold one image-work slot for the block, waiting up to ``timeout`` s for it.

        Raises MemoryPressureError if memory is still critical at the
        timeout, ImageWorkBusyError if the slots are still taken.
        """
        await self._acquire(timeout)
        try:
            yield
        finally:
            self.active -= 1
            self._wake_all()

    def status(self) -> dict[str, int]:
        """Return the gate's slots, use and refusals for metrics."""
        return {
            "slots": self.slots,
            "active": self.active,
            "waiting": self.waiting,
            "refused": self.refused,
        }

    async def _acquire(self, timeout: float | None) -> None:
        try:
            async with asyncio.timeout(timeout):
                while self.under_pressure() or self.active >= self.slots:
                    await self._wait_for_wakeup()
        except TimeoutError:
            raise self._refusal(timeout) from None
        self.active += 1

    async def _wait_for_wakeup(self) -> None:
        wakeup = asyncio.get_running_loop().create_future()
        self._wakeups.append(wakeup)
        try:
            await wakeup
        finally:
            with contextlib.suppress(ValueError):
                self._wakeups.remove(wakeup)

    def _wake_all(self) -> None:
        wakeups, self._wakeups = self._wakeups, []
        for wakeup in wakeups:
            # A waiter left on a finished (test) loop can never run again.
            if not wakeup.done() and not wakeup.get_loop().is_closed():
                wakeup.set_result(None)

    def _refusal(self, timeout: float | None) -> ImageWorkRefusedError:
        self.refused += 1
        if self.under_pressure():
            logger.warning("image work refused: memory critical for %s s", timeout)
            return MemoryPressureError(
                f"memory stayed critical for {timeout} s; image work refused"
            )
        return ImageWorkBusyError(
            f"all {self.slots} image-work slot(s) stayed busy for {timeout} s"
        )


_default_gate: ImageWorkGate | None = None


def image_work_gate() -> ImageWorkGate:
    """Return the process's image-work gate, woken by the memory guard."""
    global _default_gate
    if _default_gate is None:
        _default_gate = ImageWorkGate()
        add_state_listener(_default_gate.pressure_changed)
    return _default_gate


def image_work_slot(
    timeout: float | None = DEFAULT_IMAGE_WORK_TIMEOUT_SECONDS,
) -> AbstractAsyncContextManager[None]:
    """Return ``async with image_work_slot(): ...`` for one image pipeline."""
    return image_work_gate().slot(timeout)
