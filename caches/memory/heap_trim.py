"""Hand the C heap's free pages back to the kernel (glibc's malloc_trim).

CPython frees a large object (a dict or list table above 512 bytes, a JSON
payload's buffers) to malloc, which keeps the freed pages for reuse: after
the gateway's GUILD_CREATE bursts and under a cache's steady churn the
process's RSS holds several MB of free heap. `malloc_trim(0)` returns every
whole free page (in the middle of the heap too, since glibc 2.8). The worker
calls it once ready and then every HEAP_TRIM_SECONDS (a few ms on a 200 MB
heap). Elsewhere than glibc (musl, macOS) it does nothing.

glibc serves a block of at least its mmap threshold (128 KiB to start) from
a mapping of its own, returned to the kernel the moment it is freed; but the
threshold slides: each such block freed raises it to that block's size (up
to 32 MiB), so from then on a cache's dict table or a slot queue's list
resized past 128 KiB comes from the heap, and the heap fills with free
holes between trims. `set_mmap_threshold` fixes the threshold (which ends
the sliding), as the worker does at start with HEAP_MMAP_THRESHOLD_KB:
measured on `benchmarks/runbot_rss.py --messages 60000`, 128 against 0 (the
sliding threshold), 185.3 against 192.8 MB at 60,000 messages, peak 185.6
against 195.6 MB. The default is 512, above asyncio's 256 KiB socket read
buffer (`_SelectorSocketTransport.max_size`): at 128 every read mapped that
buffer, shrank it (mremap) and unmapped it when the bytes were freed, a
gateway frame's worth of system calls and a page fault each, 7% of the
worker's CPU; peak RSS 189.7 against 185.9 MB.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

#: mallopt's parameter number for the mmap threshold (glibc's malloc.h).
M_MMAP_THRESHOLD = -3
#: The largest threshold glibc accepts on 64-bit (HEAP_MAX_SIZE / 2).
MAX_MMAP_THRESHOLD = 32 * 2**20

#: How often the worker trims (it also trims once the gateway is ready).
HEAP_TRIM_SECONDS = 60.0


@functools.cache
def _libc_function(name: str, *argtypes: Any) -> Callable[..., int] | None:
    """Return glibc's function `name` (returning int), or None where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        function = getattr(libc, name)
    except (OSError, AttributeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


def _malloc_trim() -> Callable[[int], int] | None:
    """Return glibc's malloc_trim, or None where there is none."""
    return _libc_function("malloc_trim", ctypes.c_size_t)


def set_mmap_threshold(nbytes: int) -> bool:
    """Fix glibc's mmap threshold at `nbytes` (ending its sliding); False if not set.

    0 leaves glibc's own sliding threshold alone (and returns False).
    """
    if nbytes <= 0:
        return False
    if nbytes > MAX_MMAP_THRESHOLD:
        raise ValueError(f"mmap threshold {nbytes} is over {MAX_MMAP_THRESHOLD}")
    mallopt = _libc_function("mallopt", ctypes.c_int, ctypes.c_int)
    if mallopt is None:
        return False
    ok = bool(mallopt(M_MMAP_THRESHOLD, nbytes))
    if not ok:
        logger.warning("heap: glibc refused an mmap threshold of %d bytes", nbytes)
    return ok


def trim_heap() -> bool:
    """Return the C heap's free pages to the kernel; False where it cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
