"""Hand the C heap's free pages back to the kernel (glibc's malloc_trim).

CPython frees a large object (a dict or list table above 512 bytes, a JSON
payload's buffers) to malloc, which keeps the freed pages for reuse: after
the gateway's GUILD_CREATE bursts and under a cache's steady churn the
process's RSS holds several MB of free heap. `malloc_trim(0)` returns every
whole free page (in the middle of the heap too, since glibc 2.8). The worker
calls it once ready and then every HEAP_TRIM_SECONDS (a few ms on a 200 MB
heap). Elsewhere than glibc (musl, macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

#: How often the worker trims (it also trims once the gateway is ready).
HEAP_TRIM_SECONDS = 60.0


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """Return glibc's malloc_trim, or None where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


def trim_heap() -> bool:
    """Return the C heap's free pages to the kernel; False where it cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
