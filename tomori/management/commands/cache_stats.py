"""Print every live worker's cache layers as a table (or JSON with --json)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from caches.core import finite_json
from caches.live import LiveDataUnavailable
from caches.operations import (
    DATABASE_ERRORS,
    LayerRow,
    WorkerView,
    database_fault,
    format_duration,
    live_worker_views,
)
from metrics.charts.last_sample import last_cache_sizes_sample, sample_age_note
from tomori.management.commands._operator import operator_errors

COLUMNS = (
    ("cache", 24, lambda r: r.name),
    ("size", 8, lambda r: _n(r.size)),
    ("cap", 8, lambda r: _n(r.cap)),
    ("fill", 7, lambda r: _p(r.fill_percent)),
    ("population", 11, lambda r: _n(r.population.count if r.population else None)),
    ("hit", 7, lambda r: _p(r.hit_rate)),
    ("misses", 8, lambda r: _n(r.misses)),
    ("evict", 7, lambda r: _n(r.evictions)),
    ("expired", 8, lambda r: _n(r.expirations)),
    ("inval", 7, lambda r: _n(r.invalidations)),
    ("ttl", 7, lambda r: "none" if r.ttl is None else format_duration(r.ttl)),
    ("policy", 12, lambda r: r.policy),
    ("bytes", 10, lambda r: _bytes(r.bytes_estimate)),
)


def _n(value: Any) -> str:
    return "-" if value is None else f"{value:,}"


def _bytes(value: int | None) -> str:
    """Return a sampled bytes estimate as "512 B", "48.2 kB", "6.4 MB" or "-"."""
    if value is None:
        return "-"
    for unit, size in (("MB", 2**20), ("kB", 2**10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _row(cells: list[str]) -> str:
    parts = []
    for (_, width, _fn), cell in zip(COLUMNS, cells, strict=True):
        parts.append(cell.ljust(width) if width == COLUMNS[0][1] else cell.rjust(width))
    return " ".join(parts)


def _cap_parts(layer: LayerRow) -> str:
    """Return "  cap 15,000 = sum of 3 maps: main 5,000 (12 held), ..." or ""."""
    parts = layer.cap_parts
    if not parts:
        return ""
    maps = ", ".join(f"{label} {cap:,} ({size:,} held)" for label, cap, size in parts)
    return f"  cap {_n(layer.cap)} = sum of {len(parts)} maps: {maps}"


def _sample_note() -> str:
    try:
        return sample_age_note(last_cache_sizes_sample())
    except DATABASE_ERRORS as exc:
        return f"no stored sample either ({database_fault(exc)})"


class Command(BaseCommand):
    help = "Show each live worker's cache layers (size, cap, fill, hit rate, ...)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json", action="store_true", help="print JSON for scripts"
        )

    @operator_errors()
    def handle(self, *args: Any, **options: Any) -> None:
        try:
            workers = live_worker_views()
        except LiveDataUnavailable as exc:
            raise CommandError(f"{exc}; {_sample_note()}") from None
        if not workers:
            self._no_workers(as_json=options["json"])
        if options["json"]:
            data = {"workers": [worker.as_dict() for worker in workers]}
            self.stdout.write(finite_json.dumps(data, indent=2, default=str))
            return
        for worker in workers:
            self._print_worker(worker)

    def _print_worker(self, worker: WorkerView) -> None:
        shards = f" shards {worker.shard_ids}" if worker.shard_ids else ""
        memory = worker.memory
        self.stdout.write(
            self.style.MIGRATE_HEADING(f"worker {worker.worker_id}{shards}")
            + f"  snapshot {format_duration(worker.age_seconds())} old,"
            f" rss {memory.get('rss_mb')} MB of {memory.get('limit_mb')} MB"
            f" ({memory.get('state') or 'unknown'})"
        )
        self.stdout.write(_row([name for name, _, _ in COLUMNS]))
        for layer in worker.layers:
            self.stdout.write(
                self._styled(layer, _row([fn(layer) for _, _, fn in COLUMNS]))
            )
            if parts := _cap_parts(layer):
                self.stdout.write(parts)
        self.stdout.write(f"total entries: {worker.total_entries:,}\n")

    def _styled(self, layer: LayerRow, line: str) -> str:
        if layer.level == "danger":
            return self.style.ERROR(line)
        return self.style.WARNING(line) if layer.level == "warning" else line

    def _no_workers(self, *, as_json: bool) -> None:
        sample = last_cache_sizes_sample()
        if sample is not None:
            age = format_duration(sample.age_seconds)
            if as_json:
                data = {
                    "workers": [],
                    "last_sample": {
                        "age_seconds": sample.age_seconds,
                        "sizes": sample.sizes,
                    },
                }
                self.stdout.write(finite_json.dumps(data, indent=2, default=str))
            else:
                self.stdout.write(f"last cache_sizes sample ({age} old, not live):")
                for name, size in sample.sizes.items():
                    self.stdout.write(f"  {name:<24} {size:>10,}")
        raise CommandError("no bot worker is live (no snapshot published recently)")
