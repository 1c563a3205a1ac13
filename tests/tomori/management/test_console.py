"""A readable console: metric JSON lines go to their own file, seed_demo says what it did."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[3] / "."


def test_metric_lines_go_to_their_file_and_not_the_console(tmp_path: Path) -> None:
    target = tmp_path / "log" / "metrics.jsonl"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "METRICS_LOG_FILE": str(target),
    }
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "--no-imports",
            "-c",
            "import logging; from metrics.log import log_metric; "
            "log_metric('probe', {'n': 1}); logging.getLogger('x').warning('plain line')",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert '"metric":"probe"' in target.read_text()
    assert '"metric":"probe"' not in done.stderr
    assert "plain line" in done.stderr


@pytest.mark.django_db
def test_a_second_seed_demo_says_the_data_is_already_there() -> None:
    first, second = StringIO(), StringIO()
    call_command("seed_demo", "--no-user", stdout=first)
    call_command("seed_demo", "--no-user", stdout=second)
    assert "added:" in first.getvalue()
    assert "is already there: nothing to add" in second.getvalue()


def test_loading_settings_creates_no_metrics_log_file(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "METRICS_LOG_FILE": "some/new/path/metrics.jsonl",  # relative: in cwd
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []  # no folder, no file


def test_sqlite_makes_its_var_folder_when_it_first_connects(
    tmp_path: Path, settings: Any
) -> None:
    from tomori.sqlite_backend.base import DatabaseWrapper

    settings.VAR_DIR = tmp_path / "var"
    name = tmp_path / "var" / "tomori.sqlite3"
    wrapper = DatabaseWrapper(
        {
            "NAME": str(name),
            "OPTIONS": {},
            "TIME_ZONE": None,
            "CONN_MAX_AGE": 0,
            "CONN_HEALTH_CHECKS": False,
            "AUTOCOMMIT": True,
            "ATOMIC_REQUESTS": False,
            "USER": "",
            "PASSWORD": "",
            "HOST": "",
            "PORT": "",
            "TEST": {},
        },
        alias="scratch",
    )
    assert not settings.VAR_DIR.exists()  # nothing made before a connection
    wrapper.get_new_connection(wrapper.get_connection_params()).close()
    assert name.is_file()
    elsewhere = tmp_path / "typo" / "x.sqlite3"
    wrapper.settings_dict["NAME"] = str(elsewhere)
    with pytest.raises(Exception, match="unable to open"):
        wrapper.get_new_connection(wrapper.get_connection_params())
    assert not elsewhere.parent.exists()  # only var/ is made, never a typo's folder
