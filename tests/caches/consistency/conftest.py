"""Fixtures of the consistency tests: runbot processes."""

from tests.tomori.bot.worker.conftest import run_bot  # noqa: F401
