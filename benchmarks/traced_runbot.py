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

import gc
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


def census(top: int) -> str:
    """Return the live objects by type: count and shallow bytes, largest first.

    Every object the garbage collector tracks, plus the untracked ones they
    refer to (str, int, float, datetime, bytes, ... are not tracked), each
    counted once by id.
    """
    seen: set[int] = set()
    owned: set[int] = set()
    by_type: dict[str, list[int]] = {}
    # (kind, the type of the first object seen referring to it) -> [count, bytes]
    by_owner: dict[tuple[str, str], list[int]] = {}

    def name_of(obj: object) -> str:
        kind = type(obj)
        return f"{kind.__module__}.{kind.__qualname__}"

    def count(obj: object) -> None:
        row = by_type.setdefault(name_of(obj), [0, 0])
        row[0] += 1
        row[1] += sys.getsizeof(obj)

    tracked = gc.get_objects()
    # The census's own bookkeeping is no part of the worker.
    mine = {id(seen), id(owned), id(by_type), id(by_owner), id(tracked)}
    for obj in tracked:
        seen.add(id(obj))
    for obj in tracked:
        if id(obj) in mine:
            continue
        count(obj)
        owner = name_of(obj)
        for ref in gc.get_referents(obj):
            if type(ref) in OWNED_KINDS and id(ref) not in owned:
                owned.add(id(ref))
                row = by_owner.setdefault((type(ref).__name__, owner), [0, 0])
                row[0] += 1
                row[1] += sys.getsizeof(ref)
            if not gc.is_tracked(ref) and id(ref) not in seen:
                seen.add(id(ref))
                count(ref)
    sizes: dict[int, list[int]] = {}
    for obj in tracked:
        if type(obj) is set and id(obj) not in mine:
            bucket = min(len(obj), 9)
            row = sizes.setdefault(bucket, [0, 0])
            row[0] += 1
            row[1] += sys.getsizeof(obj)
    del tracked
    rows = sorted(by_type.items(), key=lambda item: -item[1][1])
    objects = sum(r[0] for _, r in rows)
    size = sum(r[1] for _, r in rows)
    lines = [f"CENSUS {objects:,} objects, {size / MIB:.1f} MB shallow"]
    for name, (n, b) in rows[:top]:
        lines.append(f"CENSUS {b / MIB:8.2f} MB {n:>10,}  {name}")
    lines.append(
        "CENSUS sets by length (9: 9 or more): "
        + ", ".join(
            f"{n}: {c:,} ({b / MIB:.1f} MB)" for n, (c, b) in sorted(sizes.items())
        )
    )
    lines.append(f"CENSUS RSS {_rss_mb():.1f} MB")
    lines.append("CENSUS by owner (the first object seen referring to it):")
    owners = sorted(by_owner.items(), key=lambda item: -item[1][1])
    for (kind, owner), (n, b) in owners[:top]:
        lines.append(f"CENSUS {b / MIB:8.2f} MB {n:>10,}  {kind} in {owner}")
    return "\n".join(lines)


#: The kinds `census` also counts by the type of object holding them.
OWNED_KINDS = (set, dict, str, int, tuple, list, frozenset, bytes, float)


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB


def _census_every(baseline: float, every: float, top: int) -> None:
    time.sleep(baseline)
    while True:
        print(census(top), flush=True)
        time.sleep(every)


def _mallocstats_every(baseline: float, every: float) -> None:
    time.sleep(baseline)
    while True:
        print(f"MALLOCSTATS RSS {_rss_mb():.1f} MB", flush=True)
        sys._debugmallocstats()
        time.sleep(every)


def _trim_every(every: float) -> None:
    """Call glibc's malloc_trim(0) every `every` seconds, printing what it gave back."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    while True:
        time.sleep(every)
        before = _rss_mb()
        libc.malloc_trim(0)
        print(f"TRIM RSS {before:.1f} -> {_rss_mb():.1f} MB", flush=True)


def main() -> None:
    """Start tracemalloc and the watcher, then run manage.py with our arguments."""
    every = float(os.environ.get("TRACE_EVERY_SECONDS", "60"))
    top = int(os.environ.get("TRACE_TOP", "25"))
    baseline = float(os.environ.get("TRACE_BASELINE_SECONDS", "120"))
    if os.environ.get("TRACE_MALLOCSTATS"):
        # Neither: pymalloc's own figures (arenas, pools, blocks in use), to stderr.
        watch = threading.Thread(
            target=_mallocstats_every, args=(baseline, every), daemon=True
        )
    elif os.environ.get("TRACE_CENSUS"):
        # No tracemalloc: a census of the live objects by type, every interval.
        watch = threading.Thread(
            target=_census_every, args=(baseline, every, top), daemon=True
        )
    else:
        tracemalloc.start(int(os.environ.get("TRACE_FRAMES", "1")))
        watch = threading.Thread(
            target=_watch, args=(baseline, every, top), daemon=True
        )
    watch.start()
    trim = float(os.environ.get("TRACE_MALLOC_TRIM_SECONDS", "0"))
    if trim > 0:
        threading.Thread(target=_trim_every, args=(trim,), daemon=True).start()
    sys.argv = [str(ROOT / "manage.py"), *sys.argv[1:]]
    sys.path.insert(0, str(ROOT))
    runpy.run_path(str(ROOT / "manage.py"), run_name="__main__")


if __name__ == "__main__":
    main()
