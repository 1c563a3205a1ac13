"""trim_heap hands the C heap's free pages back to the kernel."""

from __future__ import annotations

import platform

import pytest

from caches.memory.heap_trim import trim_heap
from caches.memory.readers import read_rss_bytes

MIB = 2**20


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="malloc_trim is glibc's",
)
def test_freed_heap_pages_leave_the_rss_once_trimmed() -> None:
    # 100 kB blocks stay below glibc's mmap threshold: they come from the
    # heap, and freeing them (but every 64th, which pins the heap's top)
    # leaves free pages in its middle that only a trim returns.
    blocks = [bytearray(100_000) for _ in range(1_000)]
    kept = blocks[::64]
    del blocks
    before = read_rss_bytes()
    assert trim_heap() is True
    after = read_rss_bytes()
    assert before is not None and after is not None
    assert before - after > 40 * MIB, (before / MIB, after / MIB)
    assert len(kept) == 16
