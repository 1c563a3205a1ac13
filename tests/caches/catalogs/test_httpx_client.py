"""The catalogs' httpx comes without its command-line client (rich, pygments, click)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_httpx_is_imported_without_its_cli() -> None:
    probe = (
        "import sys; from caches.catalogs.httpx_client import httpx; "
        "print(httpx.AsyncClient.__name__, httpx.Timeout(1.0).read); "
        "print(sorted(m for m in ('rich', 'pygments', 'click') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["AsyncClient 1.0", "[]"]
