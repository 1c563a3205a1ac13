"""Fixtures: real runbot processes (shared with tests/worker)."""

from tests.worker.conftest import run_bot  # noqa: F401 (a fixture, used by name)
