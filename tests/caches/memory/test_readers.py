"""Process and host memory readers, against fixture procfs/sysfs trees and live."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from caches.memory import MIB
from caches.memory.readers import (
    HostMemorySampler,
    detect_memory_limit_bytes,
    read_memory_figures,
    read_process_memory,
    read_rss_bytes,
)

FIXTURE_HOST_TOTAL = 2048000 * 1024


def write_vmstat(host: Path, *, pswpin: int, pswpout: int, pgmajfault: int) -> None:
    (host / "proc" / "vmstat").write_text(
        f"nr_free_pages 1\npswpin {pswpin}\npswpout {pswpout}\n"
        f"pgmajfault {pgmajfault}\n"
    )


def detect_in(root: Path, configured_mb: int | None = None) -> tuple[int, str]:
    return detect_memory_limit_bytes(
        configured_mb=configured_mb, proc_root=root / "proc", fs_root=root
    )


# --- RSS and process figures ----------------------------------------------------


def test_the_figures_use_the_configured_limit_without_a_guard() -> None:
    memory = read_memory_figures(configured_mb=4096)
    assert memory.limit_bytes == 4096 * MIB and memory.limit_source == "configured"
    assert memory.limit_mb == 4096.0 and memory.state is None
    assert memory.rss_mb is not None and memory.rss_mb > 0
    assert memory.percent == round(100 * memory.rss_mb / 4096, 1)


def test_a_guard_with_a_limit_of_its_own_names_itself_the_source() -> None:
    from caches.memory.guard import MemoryGuard

    guard = MemoryGuard(
        limit_bytes=8192 * MIB,
        warning_threshold=0.8,
        critical_threshold=0.9,
        cooldown_seconds=0,
    )
    memory = read_memory_figures(configured_mb=4096, guard=guard)
    assert (memory.limit_mb, memory.limit_source, memory.state) == (
        8192.0,
        "guard",
        "safe",
    )
    same = read_memory_figures(configured_mb=8192, guard=guard)
    assert same.limit_source == "configured"


def test_rss_is_resident_pages_times_page_size(fixtures_dir: Path) -> None:
    assert read_rss_bytes(fixtures_dir / "statm", page_size=4096) == 2500 * 4096


def test_rss_is_none_when_statm_is_missing_or_garbled(tmp_path: Path) -> None:
    garbled = tmp_path / "statm"
    garbled.write_text("nonsense")
    assert read_rss_bytes(tmp_path / "missing") is None
    assert read_rss_bytes(garbled) is None


def test_live_rss_is_positive() -> None:
    rss = read_rss_bytes()
    assert rss is not None and rss > 0


def test_process_memory_reports_rss_heap_and_gc_generations() -> None:
    figures = read_process_memory()
    assert figures["rss_mb"] > 0
    assert figures["python_allocated_blocks"] > 0
    for generation in range(3):
        assert figures[f"gc_gen{generation}_count"] >= 0
        assert figures[f"gc_gen{generation}_collections"] >= 0


def test_process_memory_includes_libvips_once_loaded() -> None:
    import pyvips  # noqa: F401

    assert "vips_tracked_mem_mb" in read_process_memory()


# --- memory limit ---------------------------------------------------------------


def test_configured_limit_wins_over_cgroup(fixtures_dir: Path) -> None:
    root = fixtures_dir / "cgroup" / "v1_limit"
    assert detect_in(root, configured_mb=512) == (512 * MIB, "configured")


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("v1_limit", (536870912, "cgroup_v1")),
        ("v1_unlimited", (FIXTURE_HOST_TOTAL, "host_total")),
        ("v1_namespaced", (268435456, "cgroup_v1")),
        ("v2_limit", (805306368, "cgroup_v2")),
        ("v2_max", (FIXTURE_HOST_TOTAL, "host_total")),
    ],
)
def test_cgroup_limit_is_found_through_mountinfo(
    fixtures_dir: Path, fixture: str, expected: tuple[int, str]
) -> None:
    assert detect_in(fixtures_dir / "cgroup" / fixture) == expected


def test_tighter_parent_cgroup_limit_applies(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    root = tmp_path / "v1"
    shutil.copytree(fixtures_dir / "cgroup" / "v1_limit", root)
    parent = root / "sys/fs/cgroup/memory/docker/memory.limit_in_bytes"
    parent.write_text("268435456\n")
    assert detect_in(root) == (268435456, "cgroup_v1")


def test_limit_is_unknown_when_nothing_is_readable(tmp_path: Path) -> None:
    assert detect_in(tmp_path) == (0, "unknown")


def test_live_limit_is_detected() -> None:
    limit, source = detect_memory_limit_bytes(configured_mb=None)
    assert limit > 0
    assert source in {"cgroup_v1", "cgroup_v2", "host_total"}


# --- host sampler ---------------------------------------------------------------


def test_normal_host_reports_meminfo_psi_and_swapfile(fixtures_dir: Path) -> None:
    host = fixtures_dir / "hosts" / "normal"
    sample = HostMemorySampler(proc_root=host / "proc", sys_root=host / "sys").sample(
        100.0
    )
    assert sample is not None
    assert sample["mem_total_mb"] == 2000.0
    assert sample["mem_available_mb"] == 1000.0
    assert sample["mem_available_percent"] == 50.0
    assert sample["mem_free_mb"] == 500.0
    assert sample["mem_cached_mb"] == 400.0
    assert sample["swap_used_mb"] == 256.0
    assert sample["psi_memory_some_avg10"] == 1.5
    assert sample["psi_memory_full_avg300"] == 0.05
    assert sample["psi_io_some_avg60"] == 2.0
    assert sample["swap_file_size_mb"] == 1024.0
    assert sample["swap_file_used_mb"] == 256.0
    assert sample["swap_zram_size_mb"] == 0.0
    assert not any(name.startswith("zram_") for name in sample)


def test_first_sample_has_no_vmstat_rates(fixtures_dir: Path) -> None:
    host = fixtures_dir / "hosts" / "normal"
    sample = HostMemorySampler(proc_root=host / "proc").sample(100.0)
    assert sample is not None
    assert not any(name.endswith("_per_s") for name in sample)


def test_zram_host_splits_swap_kinds_and_reads_mm_stat(fixtures_dir: Path) -> None:
    host = fixtures_dir / "hosts" / "zram"
    sample = HostMemorySampler(proc_root=host / "proc", sys_root=host / "sys").sample(
        100.0
    )
    assert sample is not None
    assert sample["swap_zram_size_mb"] == 1024.0
    assert sample["swap_zram_used_mb"] == 512.0
    assert sample["swap_file_size_mb"] == 2048.0
    assert sample["swap_file_used_mb"] == 0.0
    assert sample["zram_orig_data_mb"] == 512.0
    assert sample["zram_compr_data_mb"] == 128.0
    assert sample["zram_mem_used_total_mb"] == 136.0
    assert sample["zram_mem_used_max_mb"] == 140.0
    assert sample["zram_compression_ratio"] == 4.0


def test_host_without_psi_drops_only_psi_fields(fixtures_dir: Path) -> None:
    host = fixtures_dir / "hosts" / "no_psi"
    sample = HostMemorySampler(proc_root=host / "proc").sample(100.0)
    assert sample is not None
    assert sample["mem_total_mb"] == 2000.0
    assert "swap_file_size_mb" in sample
    assert not any(name.startswith("psi_") for name in sample)


def test_unreadable_meminfo_keeps_other_sources(host_copy) -> None:
    host = host_copy("normal")
    (host / "proc" / "meminfo").unlink()
    sample = HostMemorySampler(proc_root=host / "proc").sample(100.0)
    assert sample is not None
    assert "mem_total_mb" not in sample
    assert sample["psi_io_full_avg10"] == 2.5


def test_nothing_readable_returns_none(tmp_path: Path) -> None:
    sampler = HostMemorySampler(proc_root=tmp_path / "proc", sys_root=tmp_path / "sys")
    assert sampler.sample(100.0) is None


def test_vmstat_rates_are_per_second_since_previous_sample(host_copy) -> None:
    host = host_copy("normal")
    sampler = HostMemorySampler(proc_root=host / "proc", sys_root=host / "sys")
    write_vmstat(host, pswpin=1000, pswpout=2000, pgmajfault=5000)
    sampler.sample(100.0)
    write_vmstat(host, pswpin=1100, pswpout=2400, pgmajfault=5050)
    sample = sampler.sample(110.0)
    assert sample is not None
    assert sample["pswpin_per_s"] == 10.0
    assert sample["pswpout_per_s"] == 40.0
    assert sample["pgmajfault_per_s"] == 5.0


def test_counter_reset_gives_no_rate_then_rates_resume(host_copy) -> None:
    host = host_copy("normal")
    sampler = HostMemorySampler(proc_root=host / "proc", sys_root=host / "sys")
    write_vmstat(host, pswpin=1000, pswpout=2000, pgmajfault=5000)
    sampler.sample(100.0)
    write_vmstat(host, pswpin=10, pswpout=20, pgmajfault=50)
    after_reset = sampler.sample(110.0)
    write_vmstat(host, pswpin=30, pswpout=20, pgmajfault=150)
    resumed = sampler.sample(120.0)
    assert after_reset is not None and resumed is not None
    assert not any(name.endswith("_per_s") for name in after_reset)
    assert resumed["pswpin_per_s"] == 2.0
    assert resumed["pswpout_per_s"] == 0.0
    assert resumed["pgmajfault_per_s"] == 10.0


def test_live_host_sample_reads_this_machine() -> None:
    sampler = HostMemorySampler()
    sampler.sample(time.monotonic())
    sample = sampler.sample(time.monotonic() + 1.0)
    assert sample is not None
    assert sample["mem_total_mb"] > 0
    assert 0 <= sample["mem_available_percent"] <= 100
    assert "pgmajfault_per_s" in sample
