"""Run `manage.py <command>` under tracemalloc, printing what grew every interval.

Run: .venv/bin/python benchmarks/traced_runbot.py runbot --simulate ...
(what `benchmarks/runbot_rss.py --tracemalloc SECONDS` starts instead of
`manage.py`). A daemon thread takes a first snapshot TRACE_BASELINE_SECONDS
(120: past start-up and the gateway's guilds) after start, then one every
TRACE_EVERY_SECONDS (60), printing the TRACE_TOP (25) source lines whose
live allocations grew most since the first, then the same by file. Diagnosis only:
tracemalloc slows the worker and adds its own memory, so the RSS of a traced
run is not a figure.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20


def _filtered(snapshot: tracemalloc.Snapshot) -> tracemalloc.Snapshot:
    return snapshot.filter_traces(
        [
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<unknown>"),
        ]
    )


def _print_growth(first: tracemalloc.Snapshot, top: int) -> None:
    now = _filtered(tracemalloc.take_snapshot())
    traced, peak = tracemalloc.get_traced_memory()
    lines = [f"TRACE traced {traced / MIB:.1f} MB (peak {peak / MIB:.1f} MB)"]
    for group in ("lineno", "filename"):
        lines.append(f"TRACE top {top} by {group}, growth since the first snapshot:")
        for stat in now.compare_to(first, group)[:top]:
            frame = stat.traceback[0]
            where = frame.filename.removeprefix(str(ROOT) + "/")
            if group == "lineno":
                where += f":{frame.lineno}"
            lines.append(
                f"TRACE {stat.size_diff / MIB:+8.2f} MB {stat.count_diff:+9,} blocks "
                f"(now {stat.size / MIB:7.2f} MB)  {where}"
            )
    print("\n".join(lines), flush=True)


def _watch(baseline: float, every: float, top: int) -> None:
    time.sleep(baseline)
    first = _filtered(tracemalloc.take_snapshot())
    print("TRACE first snapshot taken", flush=True)
    while True:
        time.sleep(every)
        _print_growth(first, top)


def main() -> None:
    """Start tracemalloc and the watcher, then run manage.py with our arguments."""
    tracemalloc.start(int(os.environ.get("TRACE_FRAMES", "1")))
    every = float(os.environ.get("TRACE_EVERY_SECONDS", "60"))
    top = int(os.environ.get("TRACE_TOP", "25"))
    baseline = float(os.environ.get("TRACE_BASELINE_SECONDS", "120"))
    threading.Thread(target=_watch, args=(baseline, every, top), daemon=True).start()
    sys.argv = [str(ROOT / "manage.py"), *sys.argv[1:]]
    sys.path.insert(0, str(ROOT))
    runpy.run_path(str(ROOT / "manage.py"), run_name="__main__")


if __name__ == "__main__":
    main()
