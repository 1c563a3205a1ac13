"""Fixtures of the end-to-end runs: runbot processes and a browser page."""

from tests.tomori.admin.test_browser import operator_login, page  # noqa: F401
from tests.tomori.bot.worker.conftest import run_bot  # noqa: F401
