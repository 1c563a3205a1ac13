"""Structured metric log lines: one JSON object per line under `tomori.metrics`."""

from __future__ import annotations

import logging
import time
from typing import Any

from caches.core import finite_json

logger = logging.getLogger("tomori.metrics")


def log_metric(name: str, fields: dict[str, Any]) -> str:
    """Emit one `{"metric": name, ...}` JSON line and return it (non-finite numbers: null)."""
    line = finite_json.dumps(
        {"metric": name, "ts": round(time.time(), 3), **fields},
        default=str,
        separators=(",", ":"),
        sort_keys=False,
    )
    logger.info(line)
    return line
