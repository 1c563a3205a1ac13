"""httpx, imported without its command-line client.

httpx's ``__init__`` imports ``httpx._main`` (the ``httpx`` command) whenever
its optional dependencies happen to be installed: rich, pygments and click,
81 modules and about 5.7 MB of a bot worker's RSS that no process here uses.
Marking ``httpx._main`` as not importable before httpx is first imported makes
httpx take its own fallback (a ``main`` that explains the CLI is missing).
Import httpx from here (``from caches.catalogs.httpx_client import httpx``).
"""

from __future__ import annotations

import sys

if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

import httpx  # noqa: E402 (after the marker above)

__all__ = ["httpx"]
