"""The metric sink caches report through; ``metrics`` installs the real one at start.

caches never import ``metrics`` (metrics read caches, not the other way
round), yet the emergency clear, the memory guard and the discord.py sweeper
emit metric lines and rows. They call ``emit_metric`` here, which forwards to
the sink ``MetricsConfig.ready()`` registers (``metrics.logger.emit_metric``:
a JSON log line, plus a ``metric_samples`` row unless ``db=False``).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

logger = logging.getLogger(__name__)


class MetricSink(Protocol):
    """Record one metric: a log line, and with ``db`` a stored row; never raise."""

    def __call__(self, name: str, fields: dict[str, Any], *, db: bool = True) -> object:
        """Record metric ``name`` with ``fields``."""


_sink: MetricSink | None = None


def set_metric_sink(sink: MetricSink | None) -> None:
    """Make ``sink`` receive every metric caches emit (None removes it)."""
    global _sink
    _sink = sink


def emit_metric(name: str, fields: dict[str, Any], *, db: bool = True) -> None:
    """Hand one metric to the installed sink; without one it is dropped (logged)."""
    sink = _sink
    if sink is None:
        logger.debug("metric %s dropped: no metric sink installed", name)
        return
    try:
        sink(name, fields, db=db)
    except Exception:  # telemetry must never break its caller
        logger.exception("metric sink failed for %s", name)
