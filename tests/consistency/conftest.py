"""Fixtures of the consistency tests: runbot processes."""

from tests.worker.conftest import run_bot  # noqa: F401
