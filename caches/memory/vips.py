"""libvips process-wide limits and its tracked native memory.

libvips is one shared instance per process: its worker threads and operation
cache hold decoded bitmaps that no Python cache accounts for and no emergency
clear reclaims. Call ``apply_libvips_settings`` once at worker start, before
any module does image work; ``VIPS_*`` environment variables are read only at
``import pyvips`` and are not a way to change these later.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from caches.memory import MIB

logger = logging.getLogger(__name__)


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
