"""libvips process-wide limits, its tracked native memory, and the image-work gate.

libvips is one shared instance per process: its worker threads and operation
cache hold decoded bitmaps that no Python cache accounts for and no emergency
clear reclaims. Call ``apply_libvips_settings`` once at worker start, before
any module does image work; ``VIPS_*`` environment variables are read only at
``import pyvips`` and are not a way to change these later.

For the same reason every image pipeline runs inside ``async with
image_work_slot():``, which holds new image work back while the memory guard
is critical and runs one pipeline at a time (see ``ImageWorkGate``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

# Bytes in a mebibyte: the one definition every memory figure in the project uses
# (here because metrics.sampling and caches.memory_guard import this module).
MIB = 1024 * 1024


def apply_libvips_settings(
    *, concurrency: int, cache_memory_mb: int, cache_items: int, cache_files: int
) -> dict[str, int | float]:
    """Set libvips concurrency and operation-cache limits; return the effective values.

    ``concurrency=0`` means the libvips default (one thread per core);
    ``cache_items=0`` disables the operation cache. The returned values are read
    back from libvips, so they show what is really in force.
    """
    for name, value in (
        ("concurrency", concurrency),
        ("cache_memory_mb", cache_memory_mb),
        ("cache_items", cache_items),
        ("cache_files", cache_files),
    ):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    import pyvips  # deferred: importing loads the native library

    pyvips.concurrency_set(concurrency)
    pyvips.cache_set_max(cache_items)
    pyvips.cache_set_max_mem(cache_memory_mb * MIB)
    pyvips.cache_set_max_files(cache_files)
    effective = read_libvips_settings()
    logger.info(
        "libvips settings: concurrency=%s cache_items=%s cache_memory_mb=%s "
        "cache_files=%s",
        effective["concurrency"],
        effective["cache_items"],
        effective["cache_memory_mb"],
        effective["cache_files"],
    )
    return effective


def read_libvips_settings() -> dict[str, int | float]:
    """Return the concurrency and operation-cache limits libvips has in force."""
    import pyvips

    max_mem = pyvips.cache_get_max_mem()
    return {
        "concurrency": pyvips.concurrency_get(),
        "cache_items": pyvips.cache_get_max(),
        "cache_memory_mb": round(max_mem / MIB, 3),
        "cache_memory_bytes": max_mem,
        "cache_files": pyvips.cache_get_max_files(),
    }


@dataclass(frozen=True)
class _TrackedFunctions:
    mem: Callable[[], int]
    highwater: Callable[[], int]
    allocs: Callable[[], int]
    files: Callable[[], int]


def libvips_memory() -> dict[str, int | float]:
    """Return libvips' tracked native memory and operation-cache size.

    Returns ``{}`` when pyvips has not been imported (nothing to measure, and
    importing it here would load libvips just to read zeros) or when the
    counters cannot be reached.
    """
    pyvips = sys.modules.get("pyvips")
    tracked = _tracked_functions() if pyvips is not None else None
    if pyvips is None or tracked is None:
        return {}
    return {
        "vips_tracked_mem_mb": round(tracked.mem() / MIB, 3),
        "vips_tracked_mem_highwater_mb": round(tracked.highwater() / MIB, 3),
        "vips_tracked_allocs": tracked.allocs(),
        "vips_tracked_files": tracked.files(),
        "vips_operation_cache_size": pyvips.cache_get_size(),
    }


@functools.cache
def _tracked_functions() -> _TrackedFunctions | None:
    # pyvips does not wrap vips_tracked_*, but the loaded library exports them.
    for path in _loaded_libvips_paths():
        try:
            # RTLD_NOLOAD: attach to the copy pyvips uses, never load a second one.
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            return _bind_tracked(library)
        except (OSError, AttributeError):
            continue
    logger.warning("libvips tracked memory unavailable: library not found")
    return None


def _bind_tracked(library: ctypes.CDLL) -> _TrackedFunctions:
    signatures = {
        "mem": ("vips_tracked_get_mem", ctypes.c_size_t),
        "highwater": ("vips_tracked_get_mem_highwater", ctypes.c_size_t),
        "allocs": ("vips_tracked_get_allocs", ctypes.c_int),
        "files": ("vips_tracked_get_files", ctypes.c_int),
    }
    functions = {}
    for field, (symbol, restype) in signatures.items():
        function = getattr(library, symbol)
        function.restype, function.argtypes = restype, []
        functions[field] = function
    return _TrackedFunctions(**functions)


def _loaded_libvips_paths(maps_path: str = "/proc/self/maps") -> list[str]:
    """Return paths of libvips shared objects mapped into this process."""
    try:
        lines = Path(maps_path).read_text().splitlines()
    except OSError:
        return []
    paths: list[str] = []
    for line in lines:
        parts = line.split(maxsplit=5)
        path = parts[5] if len(parts) == 6 else ""
        name = os.path.basename(path)
        # pyvips-binary ships e.g. libvips-e42572c0.so.42; skip the C++ binding.
        is_libvips = name.startswith("libvips") and ".so" in name
        if is_libvips and "cpp" not in name and path not in paths:
            paths.append(path)
    return paths


# ------------------------------------------------------------------ image-work gate

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
    # Deferred: caches.memory_guard imports metrics.sampling, which imports us.
    from caches.memory_guard import current_state

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
        from caches.memory_guard import add_state_listener

        _default_gate = ImageWorkGate()
        add_state_listener(_default_gate.pressure_changed)
    return _default_gate


def image_work_slot(
    timeout: float | None = DEFAULT_IMAGE_WORK_TIMEOUT_SECONDS,
) -> AbstractAsyncContextManager[None]:
    """Return ``async with image_work_slot(): ...`` for one image pipeline."""
    return image_work_gate().slot(timeout)
