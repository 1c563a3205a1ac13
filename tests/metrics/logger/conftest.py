"""Fixtures of the metrics logger tests (tests/support/metric_fixtures.py)."""

from tests.support.metric_fixtures import (
    client,  # noqa: F401 (a fixture)
    db_metric_writer,  # noqa: F401 (a fixture)
    isolated_registry,  # noqa: F401 (a fixture)
    metric_lines,  # noqa: F401 (a fixture)
    metric_rows,  # noqa: F401 (a fixture)
    sim,  # noqa: F401 (a fixture)
)
