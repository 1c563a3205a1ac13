"""Shared fixtures for memory tests: fixture file roots and editable host copies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def host_copy(tmp_path: Path):
    """Return a factory copying a fixture host into tmp_path, so tests can edit it."""

    def copy(name: str) -> Path:
        destination = tmp_path / name
        shutil.copytree(FIXTURES / "hosts" / name, destination)
        return destination

    return copy
