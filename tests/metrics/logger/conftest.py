"""Fixtures of the metrics logger tests, shared with tests/caches/emergency."""

from tests.caches.emergency.conftest import (
    client,  # noqa: F401 (a fixture)
    db_metric_writer,  # noqa: F401 (a fixture)
    isolated_registry,  # noqa: F401 (a fixture)
    metric_lines,  # noqa: F401 (a fixture)
    metric_rows,  # noqa: F401 (a fixture)
    sim,  # noqa: F401 (a fixture)
)
