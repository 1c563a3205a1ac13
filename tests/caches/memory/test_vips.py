"""libvips settings read back, and tracked native memory follows decoding."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pyvips = pytest.importorskip("pyvips")

from caches.memory import vips  # noqa: E402
from caches.memory.vips import (  # noqa: E402
    apply_libvips_settings,
    libvips_memory,
    read_libvips_settings,
)


@pytest.fixture(autouse=True)
def restore_libvips_settings() -> Iterator[None]:
    """Put libvips' process-wide settings back so other tests are unaffected."""
    before = read_libvips_settings()
    yield
    pyvips.concurrency_set(before["concurrency"])
    pyvips.cache_set_max(before["cache_items"])
    pyvips.cache_set_max_mem(before["cache_memory_bytes"])
    pyvips.cache_set_max_files(before["cache_files"])


def test_settings_take_effect_and_are_read_back() -> None:
    effective = apply_libvips_settings(
        concurrency=1, cache_memory_mb=16, cache_items=50, cache_files=0
    )
    assert effective == {
        "concurrency": 1,
        "cache_items": 50,
        "cache_memory_mb": 16.0,
        "cache_memory_bytes": 16 * 1024 * 1024,
        "cache_files": 0,
    }
    assert pyvips.concurrency_get() == 1
    assert pyvips.cache_get_max() == 50
    assert pyvips.cache_get_max_mem() == 16 * 1024 * 1024
    assert pyvips.cache_get_max_files() == 0


def test_negative_setting_is_rejected() -> None:
    with pytest.raises(ValueError, match="cache_items"):
        apply_libvips_settings(
            concurrency=1, cache_memory_mb=16, cache_items=-1, cache_files=0
        )


def test_settings_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="caches.memory.vips")
    apply_libvips_settings(
        concurrency=1, cache_memory_mb=16, cache_items=50, cache_files=0
    )
    assert "concurrency=1" in caplog.text
    assert "cache_memory_mb=16.0" in caplog.text


def test_decoding_raises_tracked_memory_and_trimming_cache_drops_it(
    tmp_path: Path,
) -> None:
    apply_libvips_settings(
        concurrency=1, cache_memory_mb=100, cache_items=100, cache_files=10
    )
    path = tmp_path / "black.png"
    pyvips.Image.black(2000, 2000).write_to_file(str(path))
    before = libvips_memory()
    image = pyvips.Image.new_from_file(str(path))
    image.avg()  # forces the decode
    del image
    decoded = libvips_memory()
    pyvips.cache_set_max(0)
    trimmed = libvips_memory()
    # A 2000x2000 one-band image is ~4 MB once decoded.
    assert decoded["vips_tracked_mem_mb"] >= before["vips_tracked_mem_mb"] + 3.5
    assert decoded["vips_operation_cache_size"] > 0
    assert trimmed["vips_tracked_mem_mb"] < decoded["vips_tracked_mem_mb"] - 3.5
    assert trimmed["vips_operation_cache_size"] == 0
    assert decoded["vips_tracked_mem_highwater_mb"] >= decoded["vips_tracked_mem_mb"]


def test_tracked_memory_fields_are_numbers() -> None:
    figures = libvips_memory()
    assert set(figures) == {
        "vips_tracked_mem_mb",
        "vips_tracked_mem_highwater_mb",
        "vips_tracked_allocs",
        "vips_tracked_files",
        "vips_operation_cache_size",
    }
    assert all(value >= 0 for value in figures.values())


def test_memory_is_empty_when_pyvips_is_not_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "pyvips")
    assert libvips_memory() == {}


def test_memory_is_empty_when_library_cannot_be_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(vips, "_loaded_libvips_paths", lambda: [])
    vips._tracked_functions.cache_clear()
    try:
        assert libvips_memory() == {}
    finally:
        vips._tracked_functions.cache_clear()


def test_library_paths_come_from_the_process_maps(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 fe:00 1 /venv/pyvips_binary.libs/libvips-e4.so.42\n"
        "7f01-7f02 r--p 00001000 fe:00 1 /venv/pyvips_binary.libs/libvips-e4.so.42\n"
        "7f02-7f03 r-xp 00000000 fe:00 2 /usr/lib/libvips-cpp.so.42\n"
        "7f03-7f04 rw-p 00000000 00:00 0 \n"
        "7f04-7f05 r-xp 00000000 fe:00 3 /usr/lib/libglib-2.0.so.0\n"
    )
    assert vips._loaded_libvips_paths(str(maps)) == [
        "/venv/pyvips_binary.libs/libvips-e4.so.42"
    ]
