"""trim_heap hands the C heap's free pages back to the kernel; a fixed mmap threshold keeps large blocks off the heap."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from caches.memory.heap_trim import MAX_MMAP_THRESHOLD, set_mmap_threshold, trim_heap
from caches.memory.readers import read_rss_bytes
from tomori.domain.knobs.table import KNOBS_BY_NAME

MIB = 2**20
ROOT = Path(__file__).resolve().parents[3]
GLIBC = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="malloc_trim and mallopt are glibc's",
)


@GLIBC
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


# A child process: glibc's malloc state is the whole process's, and the test
# must see the threshold slide first. 1,000 blocks of 300 kB (above the
# 128 KiB start threshold), every 64th kept to pin the heap, the rest freed;
# prints the MiB the freed blocks left in the RSS.
_FREED_BLOCKS_CHILD = """
import sys
from caches.memory.heap_trim import set_mmap_threshold
from caches.memory.readers import read_rss_bytes
big = bytearray(4 * 2**20)  # mapped; freeing it slides the threshold to 4 MiB
del big
if sys.argv[1] == "fixed":
    assert set_mmap_threshold(128 * 1024)
before = read_rss_bytes()
blocks = [bytearray(300_000) for _ in range(1_000)]
kept = blocks[::64]
del blocks
print((read_rss_bytes() - before) / 2**20)
"""


def _child(code: str, argument: str) -> str:
    """Run `code` in a fresh interpreter (its own malloc state); return its output."""
    child = subprocess.run(
        [sys.executable, "-c", code, argument],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return child.stdout


def _retained_mib(mode: str) -> float:
    return float(_child(_FREED_BLOCKS_CHILD, mode))


@GLIBC
def test_a_fixed_mmap_threshold_hands_large_freed_blocks_back_at_once() -> None:
    # Slid to 4 MiB, glibc serves the 300 kB blocks from the heap, and the
    # freed ones stay resident (between the kept ones) until a trim.
    assert _retained_mib("sliding") > 100
    # Fixed at 128 KiB, each block is its own mapping, unmapped when freed.
    assert _retained_mib("fixed") < 20


def test_zero_keeps_glibcs_threshold_and_a_huge_one_is_refused() -> None:
    assert set_mmap_threshold(0) is False
    with pytest.raises(ValueError, match="over"):
        set_mmap_threshold(MAX_MMAP_THRESHOLD + 1)


# A child process (glibc's malloc state is the whole process's): fixes the
# threshold at argv[1] KiB, then reads ten small messages from a socket as
# asyncio's transports read (recv into a max_size buffer, shrunk to what came)
# and prints how many of the ten byte strings glibc mapped.
_SOCKET_READS_CHILD = """
import asyncio.selector_events, ctypes, socket, sys
from caches.memory.heap_trim import set_mmap_threshold

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
mallinfo2.restype = MallInfo2
assert set_mmap_threshold(int(sys.argv[1]) * 1024)
size = asyncio.selector_events._SelectorSocketTransport.max_size
ours, theirs = socket.socketpair()
before = mallinfo2().hblks
kept = []
for _ in range(10):
    theirs.send(b"x" * 100)
    kept.append(ours.recv(size))
print(mallinfo2().hblks - before)
"""


def _mapped_reads(threshold_kb: int) -> int:
    return int(_child(_SOCKET_READS_CHILD, str(threshold_kb)))


@GLIBC
def test_the_default_threshold_keeps_socket_reads_off_mmap() -> None:
    # asyncio reads into a 256 KiB buffer: at 128 KiB each read is a mapping
    # of its own (mmap, mremap, munmap: system calls a gateway frame).
    assert _mapped_reads(128) == 10
    default_kb = KNOBS_BY_NAME["HEAP_MMAP_THRESHOLD_KB"].default
    assert _mapped_reads(default_kb) == 0
