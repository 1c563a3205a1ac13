"""The runtime set alone (`requirements.txt`, what production installs) runs every process.

A virtualenv of requirements.txt and nothing else starts, for real, against
PostgreSQL and a Redis of the test's own: `gunicorn tomori.wsgi`, `celery -A
tomori worker`, `celery -A tomori beat` and `manage.py runbot --simulate`
(and the fake OpenRouter the worker and the task fetch from). An operator
saves a persona through the admin over HTTP and sees the bot worker serve
the new name; beat's first refresh runs in the Celery worker; each process
stops on its SIGTERM with exit code 0, having printed no traceback and no
WARNING.

The virtualenv is built once per lock and Python, under var/runtime-venvs/.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from django.urls import reverse
from django.utils.html import escape
from packaging.utils import canonicalize_name

from tests.support.faults import free_port, wait_until
from tests.support.processes import WatchedProcess
from tests.tomori.bot.pipeline.conftest import busiest_guild
from tests.tomori.bot.worker.conftest import test_database_url as database_url
from tests.topology.conftest import ROOT, bare_env
from tests.topology.test_dependencies import NOT_IN_PRODUCTION
from tomori.bot.demo import seed_world
from tomori.bot.simulator import Scenario, generate_world
from tomori.domain.models import Persona, Server

pytestmark = pytest.mark.e2e

VENVS = ROOT / "var" / "runtime-venvs"
BUILT = ".built"  # written last: a venv without it was interrupted
PASSWORD = "runtime-set-only"
WAIT_SECONDS = 90  # beat's first refresh comes 30 s after it starts
REFRESHED = re.compile(r"refresh_openrouter_catalogs\[[\w-]+\] succeeded")


def _venv_key() -> str:
    """Return what the venv is made of: the runtime lock and the interpreter."""
    digest = hashlib.sha256(sys.version.encode())
    for lock in (ROOT / "requirements.txt", ROOT / "requirements" / "runtime.txt"):
        digest.update(lock.read_bytes())
    return digest.hexdigest()[:16]


def runtime_venv() -> Path:
    """Return the bin/ of a virtualenv of requirements.txt alone, built once per key."""
    VENVS.mkdir(parents=True, exist_ok=True)
    venv = VENVS / _venv_key()
    with (VENVS / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another pytest may be building it
        if not (venv / BUILT).exists():
            for stale in (p for p in VENVS.iterdir() if p.is_dir()):
                shutil.rmtree(stale)  # older locks', or an interrupted build
            _build(venv)
            (venv / BUILT).touch()
    return venv / "bin"


def _build(venv: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
    done = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-compile",
         "--require-hashes", "-r", ROOT / "requirements.txt"],
        env=_pip_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def _pip_env() -> dict[str, str]:
    # A new terminal's environment, plus this machine's pip settings (index, cache).
    return bare_env(**{k: v for k, v in os.environ.items() if k.startswith("PIP_")})


def _production_env(bin_dir: Path, **services: str) -> dict[str, str]:
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "TOMORI_ENV_FILE": os.devnull,
        "SECRET_KEY": "x" * 50,
        "CRYPTO_SECRET_V1": "y" * 32,
        "CRYPTO_SECRET_CURRENT": "1",
        "ALLOWED_HOSTS": "127.0.0.1",
        "PYTHONUNBUFFERED": "1",
        # The bot connects half a lock TTL after taking its lock: 2 s, not 15.
        "SHARD_LOCK_TTL_SECONDS": "4",
        "WORKER_SNAPSHOT_INTERVAL_SECONDS": "1",
        **services,
    }


def test_the_runtime_set_holds_no_tool() -> None:
    bin_dir = runtime_venv()
    listed = subprocess.run(
        [bin_dir / "python", "-m", "pip", "list", "--format", "json"],
        env=_pip_env(), capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    installed = {canonicalize_name(p["name"]) for p in json.loads(listed.stdout)}
    assert {"django", "gunicorn", "celery", "packaging"} <= installed
    assert sorted(installed & set(NOT_IN_PRODUCTION)) == []
    modules = ("pytest", "mypy", "ruff", "playwright", "hypothesis", "importlinter")
    probe = "import importlib.util as u, sys; print([m for m in sys.argv[1:] if u.find_spec(m)])"
    found = subprocess.run(
        [bin_dir / "python", "-c", probe, *modules], env=bare_env(),
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert found.stdout.strip() == "[]"


class Production:
    """The production processes of one test, started from the runtime venv in `checkout`."""

    def __init__(self, checkout: Path, env: dict[str, str]) -> None:
        self.checkout, self.env = checkout, env
        self.started: dict[str, WatchedProcess] = {}

    def start(self, name: str, *argv: str | Path) -> WatchedProcess:
        process = WatchedProcess(argv, env=self.env, cwd=self.checkout)
        self.started[name] = process
        return process

    def create_operator(self) -> None:
        """`manage.py createsuperuser` as production runs it (and hashes the password)."""
        env = {**self.env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD}
        done = subprocess.run(
            ["python", "manage.py", "createsuperuser", "--noinput",
             "--username", "operator", "--email", "operator@example.org"],
            cwd=self.checkout, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr

    def stop(self) -> dict[str, int]:
        """SIGTERM each (the bot first: it releases its lock); return the exit codes."""
        codes = {}
        for name, process in reversed(self.started.items()):
            process.proc.terminate()
            codes[name] = process.wait_exit(timeout=30)
        return codes

    def kill(self) -> None:
        for process in self.started.values():
            if process.proc.poll() is None:
                process.proc.kill()
                process.proc.wait(10)


@pytest.fixture
def production(
    checkout: Path, tmp_path: Path, own_redis, postgres: None
) -> Iterator[tuple[Production, str]]:  # type: ignore[no-untyped-def]
    """Start every production process from the runtime venv; return them and the admin's URL."""
    bin_dir = runtime_venv()
    openrouter_port, admin = free_port(), f"http://127.0.0.1:{free_port()}"
    env = _production_env(
        bin_dir,
        DATABASE_URL=database_url(),
        REDIS_URL=own_redis.url,
        OPENROUTER_BASE_URL=f"http://127.0.0.1:{openrouter_port}/api/v1",
    )
    running = Production(checkout, env)
    try:
        running.start(
            "openrouter", bin_dir / "python", "-m", "caches.catalogs.fake_server",
            "--port", str(openrouter_port),
        ).wait_for("fake OpenRouter at")  # fmt: skip
        running.start(
            "admin", bin_dir / "gunicorn", "tomori.wsgi", "--workers", "1",
            "--bind", admin.removeprefix("http://"),
        )  # fmt: skip
        running.start("worker", bin_dir / "celery", "-A", "tomori", "worker",
                      "-l", "info", "--concurrency", "1")  # fmt: skip
        running.start("beat", bin_dir / "celery", "-A", "tomori", "beat", "-l", "info",
                      "--schedule", str(tmp_path / "celerybeat-schedule"))  # fmt: skip
        running.start("bot", bin_dir / "python", "manage.py", "runbot", "--simulate",
                      "--traffic-rate", "50")  # fmt: skip
        yield running, admin
    finally:
        running.kill()


class FormFields(HTMLParser):
    """The fields a browser submits from a page's forms: inputs, selected options, text."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        name, kind = found.get("name"), found.get("type")
        if tag == "input" and name and kind not in ("submit", "button", "file"):
            if kind not in ("checkbox", "radio"):
                self.fields[name] = found.get("value") or ""
            elif "checked" in found:
                self.fields[name] = found.get("value") or "on"
        elif tag == "select" and name:
            self._select = name
        elif tag == "option" and self._select and "selected" in found:
            self.fields[self._select] = found.get("value") or ""
        elif tag == "textarea" and name:
            self._textarea, self.fields[name] = name, ""

    def handle_endtag(self, tag: str) -> None:
        if tag in ("select", "textarea"):
            self._select = self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._textarea:  # a browser drops the newline right after <textarea>
            text = self.fields[self._textarea] + data
            self.fields[self._textarea] = text.removeprefix("\n")


def _form(html: str) -> dict[str, str]:
    parser = FormFields()
    parser.feed(html)
    return parser.fields


def _wait_until(check, what: str, timeout: float = WAIT_SECONDS) -> None:  # type: ignore[no-untyped-def]
    # Polling a server that answers in its own time: every half second.
    assert wait_until(check, timeout=timeout, interval=0.5), (
        f"{what}: not within {timeout} s"
    )


def _answers(client: httpx.Client, path: str) -> bool:
    try:
        return client.get(path).status_code == 200
    except httpx.TransportError:
        return False


def _log_in(client: httpx.Client) -> None:
    page = client.get("/admin/login/")
    fields = {**_form(page.text), "username": "operator", "password": PASSWORD}
    done = client.post("/admin/login/?next=/admin/", data=fields)
    assert done.status_code == 302 and done.headers["location"] == "/admin/", done.text


def _rename(client: httpx.Client, persona: Persona, name: str) -> None:
    path = f"/admin/tomori/persona/{persona.pk}/change/"
    fields = {**_form(client.get(path).text), "name": name, "_save": "Save"}
    saved = client.post(path, data=fields)
    assert saved.status_code == 302, re.findall(r'class="errorlist.*?</ul>', saved.text)


def _served(client: httpx.Client, worker_page: str, name: str) -> bool:
    """Whether the worker's recent turns on its page (its live snapshot) show `name` served."""
    page = client.get(worker_page).text
    turns = re.search(r'<table class="compact recent-turns">.*?</table>', page, re.S)
    return bool(turns) and f"<td>{escape(name)}</td>" in turns[0]  # type: ignore[index]


def _seed_small_world() -> Persona:
    """Seed the bot's simulated world; return its busiest guild's main persona."""
    world = generate_world(Scenario.named("small"))
    seed_world(world)
    Server.objects.update(channel_whitelist_enabled=False)  # every turn answered
    guild = busiest_guild(world)
    return Persona.objects.get(server__server_disc_id=guild, is_main=True)


@pytest.mark.django_db(transaction=True)
def test_a_virtualenv_of_the_runtime_set_alone_runs_every_process(
    production: tuple[Production, str],
) -> None:
    running, admin = production
    persona = _seed_small_world()
    running.create_operator()
    with httpx.Client(base_url=admin, timeout=10) as client:
        _wait_until(lambda: _answers(client, "/health/"), "the admin's liveness")
        assert "celery@" in running.started["worker"].wait_for(" ready.", timeout=90)
        running.started["beat"].wait_for("sent to run once 30 s after start")
        up = running.started["bot"].wait_for(" is up", timeout=90)
        worker_id = re.search(r"worker (\S+) is up", up)[1]  # type: ignore[index]
        worker = reverse("admin:caches_worker", args=[worker_id])  # its recent turns
        running.started["bot"].wait_for("bot ready", timeout=90)
        _wait_until(lambda: _answers(client, "/health/ready/"), "the admin's readiness")
        _log_in(client)
        _wait_until(lambda: _served(client, worker, persona.name), "the seeded name")
        renamed = f"{persona.name} renamed"[:80]
        _rename(client, persona, renamed)
        assert Persona.objects.get(pk=persona.pk).name == renamed
        _wait_until(lambda: _served(client, worker, renamed), "the saved name served")
    line = running.started["worker"].wait_for(
        "refresh_openrouter_catalogs[", WAIT_SECONDS
    )
    assert "received" in line  # sent by beat: nothing else here sends tasks
    refreshed = running.started["worker"].wait_for(" succeeded in ", WAIT_SECONDS)
    assert REFRESHED.search(refreshed) and "'text': " in refreshed

    codes = running.stop()
    del codes["openrouter"]  # the stand-in for OpenRouter's servers
    assert codes == dict.fromkeys(["bot", "beat", "worker", "admin"], 0), codes
    for name, process in running.started.items():
        loud = [x for x in process.lines if "Traceback" in x or "WARNING" in x]
        assert loud == [], f"{name}:\n{process.output}"
