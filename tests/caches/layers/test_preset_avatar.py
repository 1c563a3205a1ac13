"""Preset avatar layer: warming from rows, PNG validation, lazy re-warm."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from caches.layers import preset_avatar as layer
from caches.layers.preset_avatar import (
    get_cached_preset_avatar,
    get_preset_avatar,
    initialize_preset_avatar_cache,
    is_png,
    resolve_avatar_path,
)
from caches.registry import registry
from tomori.domain.repositories import presets as presets_repo

pytestmark = pytest.mark.django_db


def tiny_png() -> bytes:
    """Return a valid 1x1 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)
    idat = zlib.compress(b"\x00\x00\x00\x00\x00")
    return (
        layer.PNG_SIGNATURE
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", idat)
        + chunk(b"IEND", b"")
    )


@pytest.fixture
def avatar_dir(tmp_path: Path, settings) -> Path:
    settings.VAR_DIR = tmp_path
    directory = tmp_path / "avatars"
    directory.mkdir()
    return directory


@pytest.fixture
def presets(avatar_dir: Path):
    (avatar_dir / "good.png").write_bytes(tiny_png())
    (avatar_dir / "fake.png").write_bytes(b"GIF89a not a png at all")
    (avatar_dir / "huge.png").write_bytes(tiny_png() + b"\x00" * 4096)
    return {
        name: presets_repo.preset_persona_create(name=name, avatar_path=path)
        for name, path in [
            ("good", "good.png"),
            ("fake", "fake.png"),
            ("huge", "huge.png"),
            ("missing", "nowhere.png"),
            ("escape", "../secret.png"),
            ("none", ""),
        ]
    }


def test_warm_loads_valid_pngs_only(run, presets, settings, django_assert_num_queries):
    settings.PRESET_AVATAR_MAX_BYTES = 1024
    # One entry per preset, as the dashboard's size shows; one valid PNG.
    assert run(initialize_preset_avatar_cache) == 6
    assert registry.stats()["preset_avatar"]["size"] == 6
    assert layer.count_valid_avatars() == 1
    with django_assert_num_queries(0):
        good = get_cached_preset_avatar(presets["good"].id)
        assert good is not None and good.png == tiny_png()
        for name in ("fake", "huge", "missing", "escape", "none"):
            assert get_cached_preset_avatar(presets[name].id) is None
        assert run(get_preset_avatar, presets["fake"].id) is None  # negative entry


def test_rewarms_lazily_after_a_clear(run, presets, django_assert_num_queries):
    run(initialize_preset_avatar_cache)
    registry.clear("preset_avatar")
    assert get_cached_preset_avatar(presets["good"].id) is None
    assert run(get_preset_avatar, presets["good"].id).name == "good"
    with django_assert_num_queries(0):
        assert get_cached_preset_avatar(presets["good"].id) is not None


def test_key_op_reloads_one_preset(run, presets, avatar_dir):
    run(initialize_preset_avatar_cache)
    (avatar_dir / "fake.png").write_bytes(tiny_png())
    assert registry.apply("preset_avatar", "key", presets["fake"].id) == 1
    assert run(get_preset_avatar, presets["fake"].id) is not None


def test_failed_warm_keeps_the_cache(run, presets, db_down):
    run(initialize_preset_avatar_cache)
    db_down(presets_repo, "list_preset_personas")
    assert run(initialize_preset_avatar_cache) == 0
    assert get_cached_preset_avatar(presets["good"].id) is not None


def test_inactive_preset_has_no_avatar(run, presets):
    presets_repo.preset_persona_update(preset_id=presets["good"].id, is_active=False)
    run(initialize_preset_avatar_cache)
    assert get_cached_preset_avatar(presets["good"].id) is None


def test_png_checks(avatar_dir: Path):
    assert is_png(tiny_png())
    assert not is_png(b"\x89PNG\r\n\x1a\n" + b"\x00" * 8)
    assert resolve_avatar_path("../x.png") is None
    assert resolve_avatar_path("a/b.png") == (avatar_dir / "a" / "b.png").resolve()
    assert resolve_avatar_path("/abs/x.png") == Path("/abs/x.png")
