"""CPU seconds per thread of the worker: where the process's CPU goes, without a profiler.

`process_cpu_seconds_total` says how much CPU a worker spends; this says which
of its threads spends it: the event loop, the database read thread, the
write-behind, the bus subscriber... Each Python thread's user+system time is
read from /proc/self/task/<native id>/stat at scrape. Labels are the thread
names with their running numbers taken out (`tomori-db-writes_0` ->
`tomori-db-writes`, `Thread-65 (process_request_thread)` ->
`process_request_thread`), so the set stays bounded; a thread that ended
keeps its last reading in its name's series, so each series only grows.
Threads Python did not start (libvips, C libraries) are the process total
minus these.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_THREAD_FUNCTION = re.compile(r"^Thread-\d+ \((.+)\)$")
_RUNNING_NUMBER = re.compile(r"[-_]\d+$")

#: Reads a native thread id's (user + system) CPU seconds; None if it is gone.
Reader = Callable[[int], float | None]


def thread_label(name: str) -> str:
    """Return a thread's name without its running numbers (a bounded label)."""
    match = _THREAD_FUNCTION.match(name)
    if match:
        return match.group(1)
    while True:
        shorter = _RUNNING_NUMBER.sub("", name)
        if shorter == name:
            return name
        name = shorter


def proc_thread_seconds(native_id: int) -> float | None:
    """Return a thread of this process's user+system CPU seconds (Linux procfs)."""
    try:
        stat = Path(f"/proc/self/task/{native_id}/stat").read_bytes()
    except OSError:
        return None
    # Fields after the command (which may hold spaces) start after its ")".
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


class ThreadCpuCollector(Collector):
    """Export `tomori_thread_cpu_seconds_total{thread}` for the Python threads."""

    def __init__(self, read: Reader = proc_thread_seconds) -> None:
        self._read = read
        self._lock = threading.Lock()  # scrapes may overlap (one thread each)
        self._live: dict[int, tuple[str, float]] = {}  # native id -> (label, seconds)
        self._ended: dict[str, float] = {}  # label -> seconds of its ended threads

    def totals(self) -> dict[str, float]:
        """Return CPU seconds per thread label, ended threads included."""
        with self._lock:
            seen: dict[int, tuple[str, float]] = {}
            for thread in threading.enumerate():
                native = thread.native_id
                seconds = None if native is None else self._read(native)
                if native is not None and seconds is not None:
                    seen[native] = (thread_label(thread.name), seconds)
            for native, (label, seconds) in self._live.items():
                now = seen.get(native)
                # Gone, or its id reused by a newer thread (which starts lower).
                if now is None or now[0] != label or now[1] < seconds:
                    self._ended[label] = self._ended.get(label, 0.0) + seconds
            self._live = seen
            totals = dict(self._ended)
            for label, seconds in seen.values():
                totals[label] = totals.get(label, 0.0) + seconds
            return totals

    def collect(self) -> Iterator[CounterMetricFamily]:
        """Yield the per-thread counter."""
        family = CounterMetricFamily(
            "tomori_thread_cpu_seconds",
            "User and system CPU seconds of the worker's Python threads, by thread "
            "name (running numbers removed); the process total less these is "
            "threads Python did not start.",
            labels=["thread"],
        )
        for label, seconds in sorted(self.totals().items()):
            family.add_metric([label], seconds)
        yield family
