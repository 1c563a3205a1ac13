"""A fresh working copy of the checkout, and commands run in it as a developer would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What a fresh clone has no copy of (or must not share with the test).
NOT_COPIED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "var",
    ".env",
    "tests",
    "benchmarks",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
)


def bare_env(**extra: str) -> dict[str, str]:
    """Return the environment of a new terminal: PATH and HOME, none of Tomori's variables."""
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    return {"PATH": path, "HOME": os.environ.get("HOME", "/root"), **extra}


def run_in(
    checkout: Path, *argv: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run a command in `checkout` with a bare environment and capture its output."""
    return subprocess.run(
        argv,
        cwd=checkout,
        env=env or bare_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """Return a copy of the working tree with no var/ and no .env, sharing the virtualenv."""
    copy = tmp_path / "tomori"
    shutil.copytree(ROOT, copy, ignore=NOT_COPIED, symlinks=True)
    (copy / ".venv").symlink_to(sys.prefix)
    return copy
