"""A second terminal just works: the .env of `make run`, one-line settings errors, var/."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.faults import free_port
from tests.topology.conftest import ROOT, bare_env, run_in

PY = "python"
SECRET_KEY_ERROR = "error: SECRET_KEY is not set."


def _write_env(checkout: Path) -> str:
    done = run_in(checkout, PY, "-m", "tomori.devenv", "write-env")
    assert done.returncode == 0, done.stderr
    return done.stdout


def _env_values(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if "=" in line]
    return dict(line.split("=", 1) for line in lines if not line.startswith("#"))


def _settings_json(checkout: Path, *, env: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    code = (
        "import json; from django.conf import settings as s; print(json.dumps({"
        "'debug': s.DEBUG, 'secret_key': s.SECRET_KEY, 'crypto': s.CRYPTO_SECRETS,"
        "'current': s.CRYPTO_SECRET_CURRENT, 'redis': s.REDIS_URL,"
        "'db': str(s.DATABASES['default']['NAME']), 'openrouter': s.TOMORI_KNOBS.OPENROUTER_BASE_URL}))"
    )
    done = run_in(checkout, PY, "manage.py", "shell", "-c", code, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_first_run_writes_a_development_env_that_later_commands_read(
    checkout: Path,
) -> None:
    assert "wrote" in _write_env(checkout)
    values = _env_values(checkout / ".env")
    assert values["DEBUG"] == "true" and values["CRYPTO_SECRET_CURRENT"] == "1"
    assert len(values["SECRET_KEY"]) >= 50 and len(values["CRYPTO_SECRET_V1"]) >= 32
    assert values["REDIS_URL"] == "redis://127.0.0.1:6390/0"
    assert values["OPENROUTER_BASE_URL"] == "http://127.0.0.1:8089/api/v1"

    seen = _settings_json(checkout)  # a second terminal: no variables at all
    assert seen["debug"] is True
    assert seen["secret_key"] == values["SECRET_KEY"]
    assert seen["crypto"] == {"1": values["CRYPTO_SECRET_V1"]}
    assert seen["current"] == "1"
    assert seen["redis"] == values["REDIS_URL"]
    assert seen["db"] == str(checkout / "var" / "tomori.sqlite3")
    assert seen["openrouter"] == values["OPENROUTER_BASE_URL"]


def test_an_existing_env_is_never_overwritten(checkout: Path) -> None:
    (checkout / ".env").write_text("DEBUG=true\nSECRET_KEY=mine\n")
    assert "kept the existing" in _write_env(checkout)
    assert (checkout / ".env").read_text() == "DEBUG=true\nSECRET_KEY=mine\n"
    assert _settings_json(checkout)["secret_key"] == "mine"


def test_the_environment_wins_over_the_env_file(checkout: Path) -> None:
    _write_env(checkout)
    seen = _settings_json(checkout, env=bare_env(REDIS_URL="redis://127.0.0.1:1/3"))
    assert seen["redis"] == "redis://127.0.0.1:1/3"


def test_gitignore_keeps_the_env_file_out_of_the_repository() -> None:
    assert ".env" in (ROOT / ".gitignore").read_text().splitlines()


@pytest.mark.parametrize(
    "argv",
    [
        (PY, "manage.py", "cache_stats"),
        (PY, "manage.py", "migrate"),
        ("celery", "-A", "tomori", "worker", "--pool", "solo"),
        ("celery", "-A", "tomori", "beat"),
    ],
    ids=["cache_stats", "migrate", "celery-worker", "celery-beat"],
)
def test_production_without_secrets_refuses_in_one_line(
    checkout: Path, argv: tuple[str, ...]
) -> None:
    done = run_in(checkout, *argv)  # no .env, no DEBUG, no SECRET_KEY
    assert done.returncode == 2
    assert done.stderr.startswith(SECRET_KEY_ERROR)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_gunicorn_stops_instead_of_respawning_a_worker_without_secrets(
    checkout: Path,
) -> None:
    bind = f"127.0.0.1:{free_port()}"
    done = run_in(checkout, "gunicorn", "tomori.wsgi", "--bind", bind)
    assert done.returncode == 4  # "App failed to load": the arbiter halts
    assert SECRET_KEY_ERROR in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_chosen_env_file_is_one_line_naming_the_variable(
    checkout: Path,
) -> None:
    env = bare_env(TOMORI_ENV_FILE=str(checkout / "missing.env"))
    done = run_in(checkout, PY, "manage.py", "check", env=env)
    assert done.returncode == 2
    assert done.stderr.startswith("error: TOMORI_ENV_FILE=")
    assert "missing.env" in done.stderr and "does not exist" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_tomori_env_file_selects_the_env_file(checkout: Path, tmp_path: Path) -> None:
    chosen = tmp_path / "other.env"
    chosen.write_text("DEBUG=true\nSECRET_KEY=from-the-chosen-file\n")
    (checkout / ".env").write_text("DEBUG=true\nSECRET_KEY=from-the-checkout\n")
    seen = _settings_json(checkout, env=bare_env(TOMORI_ENV_FILE=str(chosen)))
    assert seen["secret_key"] == "from-the-chosen-file"


def test_migrate_on_a_fresh_clone_creates_var(checkout: Path) -> None:
    assert not (checkout / "var").exists()
    done = run_in(checkout, PY, "manage.py", "migrate", env=bare_env(DEBUG="true"))
    assert done.returncode == 0, done.stderr
    assert (checkout / "var" / "tomori.sqlite3").stat().st_size > 0


def test_the_test_settings_ignore_a_developers_env(checkout: Path) -> None:
    (checkout / ".env").write_text("DEBUG=true\nREDIS_URL=redis://127.0.0.1:1/0\n")
    code = "from django.conf import settings as s; print(s.DEBUG, repr(s.REDIS_URL))"
    env = bare_env(DJANGO_SETTINGS_MODULE="tomori.settings_test")
    done = run_in(checkout, PY, "-c", f"import django; django.setup(); {code}", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "''"]
    assert os.environ["TOMORI_ENV_FILE"] == os.devnull  # and so for this very run
