"""Process and host memory readers: RSS, Python heap, libvips, cgroup limit, procfs."""

from __future__ import annotations

import functools
import gc
import logging
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from caches.memory import MIB
from caches.memory.vips import libvips_memory

logger = logging.getLogger(__name__)

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
# cgroup v1 reports "no limit" as PAGE_COUNTER_MAX pages (~2**63); anything this
# large is no real limit.
CGROUP_V1_UNLIMITED = 1 << 60
_VMSTAT_RATES = {
    "pswpin": "pswpin_per_s",
    "pswpout": "pswpout_per_s",
    "pgmajfault": "pgmajfault_per_s",
}
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _mb(value_bytes: float) -> float:
    return round(value_bytes / MIB, 2)


def read_rss_bytes(
    statm_path: str | Path = "/proc/self/statm", *, page_size: int = PAGE_SIZE
) -> int | None:
    """Return this process's resident set size in bytes, or None if unreadable."""
    try:
        with open(statm_path, "rb") as statm:
            return int(statm.read().split()[1]) * page_size
    except (OSError, ValueError, IndexError):
        return None


def read_process_memory(statm_path: str | Path = "/proc/self/statm") -> dict:
    """Return RSS, Python heap figures and libvips tracked memory as one flat dict."""
    rss = read_rss_bytes(statm_path)
    counts = gc.get_count()
    figures: dict = {
        "rss_mb": None if rss is None else _mb(rss),
        "python_allocated_blocks": sys.getallocatedblocks(),
    }
    for generation, stats in enumerate(gc.get_stats()):
        figures[f"gc_gen{generation}_count"] = counts[generation]
        figures[f"gc_gen{generation}_collections"] = stats["collections"]
    figures.update(libvips_memory())
    return figures


# --- container memory limit ---------------------------------------------------


def detect_memory_limit_bytes(
    *,
    configured_mb: int | None,
    proc_root: str | Path = "/proc",
    fs_root: str | Path = "/",
) -> tuple[int, str]:
    """Return the memory limit in bytes and where it came from.

    Sources, in order: ``configured_mb`` ("configured"), the cgroup v1 or v2
    limit of this process ("cgroup_v1" / "cgroup_v2"), MemTotal of the host
    ("host_total"). Returns ``(0, "unknown")`` when nothing is readable.
    ``fs_root`` is prepended to the mount points listed in mountinfo.
    """
    if configured_mb:
        return configured_mb * MIB, "configured"
    proc, root = Path(proc_root), Path(fs_root)
    groups = _read_proc_cgroups(proc / "self" / "cgroup")
    for version, mount_point, mount_root in _cgroup_memory_mounts(proc, groups):
        group = groups["v2" if version == "cgroup_v2" else "memory"]
        limit = _cgroup_limit(
            version, root / mount_point.lstrip("/"), mount_root, group
        )
        if limit is not None:
            return limit, version
    total = _read_key_values(proc / "meminfo").get("MemTotal")
    if total:
        return total * 1024, "host_total"
    return 0, "unknown"


def _read_proc_cgroups(path: Path) -> dict[str, str]:
    """Map each v1 controller (and "v2" for the unified line) to its group path."""
    groups: dict[str, str] = {}
    for line in _read_lines(path):
        if line.count(":") < 2:
            continue
        hierarchy_id, controllers, group = line.split(":", 2)
        if hierarchy_id == "0" and not controllers:
            groups["v2"] = group
        for controller in filter(None, controllers.split(",")):
            groups.setdefault(controller, group)
    return groups


def _cgroup_memory_mounts(
    proc: Path, groups: dict[str, str]
) -> Iterator[tuple[str, str, str]]:
    """Yield (version, mount point, mount root) of memory-capable cgroup mounts."""
    for line in _read_lines(proc / "self" / "mountinfo"):
        fields, _, tail = line.partition(" - ")
        parts, tail_parts = fields.split(), tail.split()
        if len(parts) < 5 or len(tail_parts) < 3:
            continue
        fs_type, super_options = tail_parts[0], tail_parts[2].split(",")
        mount_root, mount_point = _unescape(parts[3]), _unescape(parts[4])
        if fs_type == "cgroup" and "memory" in super_options and "memory" in groups:
            yield "cgroup_v1", mount_point, mount_root
        elif fs_type == "cgroup2" and "v2" in groups:
            yield "cgroup_v2", mount_point, mount_root


def _cgroup_limit(
    version: str, mount_dir: Path, mount_root: str, group: str
) -> int | None:
    """Return the tightest finite limit from the group up to the mount, or None."""
    filename = "memory.limit_in_bytes" if version == "cgroup_v1" else "memory.max"
    if mount_root == "/":
        relative = group
    elif group == mount_root or group.startswith(mount_root.rstrip("/") + "/"):
        relative = group[len(mount_root) :]
    else:  # the group lies outside this mount's view: use the mount itself
        relative = ""
    directory = mount_dir / relative.lstrip("/")
    limits = []
    for candidate in [directory, *directory.parents]:
        limit = _read_limit_file(candidate / filename)
        if limit is not None:
            limits.append(limit)
        if candidate == mount_dir or mount_dir not in candidate.parents:
            break
    return min(limits) if limits else None


def _read_limit_file(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max" or not text.isdigit():
        return None
    value = int(text)
    return None if value >= CGROUP_V1_UNLIMITED else value


def _unescape(path: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    return _OCTAL_ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), path)


# --- the figures every view shows ---------------------------------------------------


class GuardView(Protocol):
    """What the figures need of a memory guard (``caches.memory.guard.MemoryGuard``)."""

    limit_bytes: int

    @property
    def state(self) -> object:
        """Return the guard's current state."""


@dataclass(frozen=True)
class MemoryFigures:
    """Process memory against the limit in force: one reading for every view.

    The dashboard snapshot and the ``cache_sizes`` row both show these, each
    under its own field names.
    """

    process: dict[str, Any]
    limit_bytes: int
    limit_source: str
    state: str | None

    @property
    def rss_mb(self) -> float | None:
        """Return the resident set size in MiB, None when unreadable."""
        return self.process.get("rss_mb")

    @property
    def limit_mb(self) -> float | None:
        """Return the limit in MiB (one decimal), None when no limit is known."""
        return round(self.limit_bytes / MIB, 1) if self.limit_bytes else None

    @property
    def percent(self) -> float | None:
        """Return RSS as a percentage of the limit, None when either is unknown."""
        rss_mb = self.rss_mb
        if not self.limit_bytes or rss_mb is None:
            return None
        return round(100 * rss_mb * MIB / self.limit_bytes, 1)


def read_memory_figures(
    *, configured_mb: int | None, guard: GuardView | None = None
) -> MemoryFigures:
    """Read process memory now, against the guard's limit or the detected one.

    The source is "guard" when a guard runs with a limit of its own, else where
    the detected limit came from ("configured", "cgroup_v1"/"cgroup_v2",
    "host_total": no container limit, the host's memory stands in, "unknown").
    """
    limit_bytes, source = detected_memory_limit(configured_mb)
    state = None
    if guard is not None:
        if guard.limit_bytes != limit_bytes:
            limit_bytes, source = guard.limit_bytes, "guard"
        state = str(guard.state)
    return MemoryFigures(
        process=read_process_memory(),
        limit_bytes=limit_bytes,
        limit_source=source,
        state=state,
    )


@functools.lru_cache(maxsize=4)
def detected_memory_limit(configured_mb: int | None) -> tuple[int, str]:
    """Return ``detect_memory_limit_bytes`` once per setting (it cannot change)."""
    return detect_memory_limit_bytes(configured_mb=configured_mb)


# --- host memory ----------------------------------------------------------------


class HostMemorySampler:
    """Sample host memory counters from procfs/sysfs; keeps state for vmstat rates."""

    def __init__(
        self, *, proc_root: str | Path = "/proc", sys_root: str | Path = "/sys"
    ) -> None:
        self.proc_root = Path(proc_root)
        self.sys_root = Path(sys_root)
        self._previous_vmstat: dict[str, int] | None = None
        self._previous_at: float | None = None

    def sample(self, now: float) -> dict | None:
        """Return flat host memory fields, or None if no source could be read.

        ``now`` is a monotonic timestamp in seconds, used for per-second rates.
        """
        readers = (
            self._meminfo,
            lambda: self._pressure("memory"),
            lambda: self._pressure("io"),
            self._swaps,
            self._zram,
            lambda: self._vmstat_rates(now),
        )
        fields: dict = {}
        readable = False
        for reader in readers:
            part = reader()
            if part is not None:
                readable = True
                fields.update(part)
        return fields if readable else None

    def _meminfo(self) -> dict | None:
        info = _read_key_values(self.proc_root / "meminfo")
        if "MemTotal" not in info:
            return None
        total, available = info["MemTotal"], info.get("MemAvailable", 0)
        swap_used = info.get("SwapTotal", 0) - info.get("SwapFree", 0)
        return {
            "mem_total_mb": _mb(total * 1024),
            "mem_available_mb": _mb(available * 1024),
            "mem_available_percent": round(100 * available / total, 2),
            "mem_free_mb": _mb(info.get("MemFree", 0) * 1024),
            "mem_cached_mb": _mb(info.get("Cached", 0) * 1024),
            "swap_total_mb": _mb(info.get("SwapTotal", 0) * 1024),
            "swap_used_mb": _mb(swap_used * 1024),
        }

    def _pressure(self, resource: str) -> dict | None:
        lines = _read_lines(self.proc_root / "pressure" / resource)
        fields = {}
        for line in lines:
            kind, *pairs = line.split()
            for pair in pairs:
                name, _, value = pair.partition("=")
                if name.startswith("avg") and _is_number(value):
                    fields[f"psi_{resource}_{kind}_{name}"] = float(value)
        return fields or None

    def _swaps(self) -> dict | None:
        try:
            lines = (self.proc_root / "swaps").read_text().splitlines()[1:]
        except OSError:
            return None
        totals = dict.fromkeys(("zram", "file"), (0, 0))
        for line in lines:
            parts = line.split()
            if len(parts) < 4:
                continue
            # Anything that is not zram (a swap file or partition) hits the disk.
            kind = "zram" if Path(parts[0]).name.startswith("zram") else "file"
            size, used = totals[kind]
            totals[kind] = (size + int(parts[2]), used + int(parts[3]))
        fields = {}
        for kind, (size_kib, used_kib) in totals.items():
            fields[f"swap_{kind}_size_mb"] = _mb(size_kib * 1024)
            fields[f"swap_{kind}_used_mb"] = _mb(used_kib * 1024)
        return fields

    def _zram(self) -> dict | None:
        sums = [0, 0, 0, 0]  # orig_data, compr_data, mem_used_total, mem_used_max
        found = False
        for path in sorted((self.sys_root / "block").glob("zram*/mm_stat")):
            try:
                values = [int(value) for value in path.read_text().split()]
            except (OSError, ValueError):
                continue
            if len(values) < 5:
                continue
            found = True
            for index, value in enumerate((*values[:3], values[4])):
                sums[index] += value
        if not found:
            return None
        orig, compr, used_total, used_max = sums
        fields = {
            "zram_orig_data_mb": _mb(orig),
            "zram_compr_data_mb": _mb(compr),
            "zram_mem_used_total_mb": _mb(used_total),
            "zram_mem_used_max_mb": _mb(used_max),
        }
        if compr:  # an empty device has no ratio
            fields["zram_compression_ratio"] = round(orig / compr, 2)
        return fields

    def _vmstat_rates(self, now: float) -> dict | None:
        counters = _read_key_values(self.proc_root / "vmstat", separator=" ")
        current = {name: counters[name] for name in _VMSTAT_RATES if name in counters}
        if not current:
            return None
        previous, previous_at = self._previous_vmstat, self._previous_at
        self._previous_vmstat, self._previous_at = current, now
        if previous is None or previous_at is None or now <= previous_at:
            return {}
        rates = {}
        for name, value in current.items():
            # A counter that went down was reset (reboot): no rate this time.
            if name in previous and value >= previous[name]:
                rate = (value - previous[name]) / (now - previous_at)
                rates[_VMSTAT_RATES[name]] = round(rate, 2)
        return rates


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def _read_key_values(path: Path, *, separator: str = ":") -> dict[str, int]:
    """Parse ``key<separator> value [unit]`` lines into ints, skipping bad lines."""
    values = {}
    for line in _read_lines(path):
        key, _, rest = line.partition(separator)
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key.strip()] = int(parts[0])
    return values
