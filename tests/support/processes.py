"""Run a Python process of the project's (a writer, a shell) and check how it ended."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_python(
    *args: str,
    env: dict[str, str] | None = None,
    returncode: int = 0,
    timeout: float = 120,
) -> str:
    """Run `python *args` from the repository root; assert its exit code; return its stdout."""
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == returncode, done.stderr
    return done.stdout
