"""Fixtures: real runbot processes (shared with tests/tomori/bot/worker)."""

from tests.tomori.bot.worker.conftest import run_bot  # noqa: F401 (a fixture, used by name)
