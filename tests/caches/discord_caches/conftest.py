"""Fixtures of the Discord caches' tests (tests/support/metric_fixtures.py)."""

from tests.support.metric_fixtures import (
    client,  # noqa: F401 (a fixture)
    metric_lines,  # noqa: F401 (a fixture)
    metric_rows,  # noqa: F401 (a fixture)
    sim,  # noqa: F401 (a fixture)
)
