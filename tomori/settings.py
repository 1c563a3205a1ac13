"""Django settings for Tomori, read from the environment with django-environ."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured

from tomori.devenv import env_file_path
from tomori.domain.knobs import DEBUG_KNOB, Knobs, load_knobs, parse_knob
from tomori.domain.service_urls import default_bus_channel, redis_url_error

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
# `make run` writes a development .env (tomori/devenv.py); TOMORI_ENV_FILE picks another.
ENV_FILE = env_file_path()
environ.Env.read_env(ENV_FILE, overwrite=False)

# Strict like every knob: "maybe" is neither dev mode nor production, and a
# guess either way is wrong (env.bool would read it as false).
DEBUG, _debug_error = parse_knob(DEBUG_KNOB, os.environ.get("DEBUG"))
if _debug_error:
    raise ImproperlyConfigured(_debug_error)

SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set SECRET_KEY (a long random string) or, "
            "for local development only, DEBUG=true."
        )
    SECRET_KEY = "dev-only-insecure-secret-key-do-not-use-in-production"

ALLOWED_HOSTS = env.list(
    "ALLOWED_HOSTS", default=["127.0.0.1", "localhost"] if DEBUG else []
)
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "tomori.domain.apps.DomainConfig",
    "caches.apps.CachesConfig",
    "metrics.apps.MetricsConfig",
    "tomori.apps.EntryPointsConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "tomori.admin.hostile.HostileInputMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "tomori.middleware.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "tomori.urls"
WSGI_APPLICATION = "tomori.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env.db_url(
        "DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'tomori.sqlite3'}"
    )
}
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=0))
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the admin thread read while the bot worker writes.
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].setdefault(
        "init_command", "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
    )
    # Deferred transactions that read then write fail at once with "database
    # is locked" while the bot writes; IMMEDIATE takes the write lock up front
    # and waits up to `timeout` for it instead.
    DATABASES["default"]["OPTIONS"].setdefault("transaction_mode", "IMMEDIATE")
    # SQLite creates its file but not the directory (`migrate` on a fresh
    # clone): this backend makes var/ when it first connects, not here.
    DATABASES["default"]["ENGINE"] = "tomori.sqlite_backend"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# Redis: optional. Set, it carries the invalidation bus, the workers' live
# snapshots and Celery; unset, everything runs in one process.
REDIS_URL = env.str("REDIS_URL", default="")
# Pub/sub ignores the database number: deployments sharing a Redis server on
# different dbs would share a fixed channel, so the default names the db.
TOMORI_BUS_CHANNEL = env.str("TOMORI_BUS_CHANNEL", default="")
if not TOMORI_BUS_CHANNEL:
    TOMORI_BUS_CHANNEL = default_bus_channel(REDIS_URL)
TOMORI_WORKER_ID = env.str("TOMORI_WORKER_ID", default="")

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = REDIS_URL or "cache+memory://"
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = TIME_ZONE

# Versioned encryption keys for stored secrets (webhook tokens):
# CRYPTO_SECRET_V1, CRYPTO_SECRET_V2, ... and CRYPTO_SECRET_CURRENT=<n>.
CRYPTO_SECRETS: dict[int, str] = {
    int(name.removeprefix("CRYPTO_SECRET_V")): value
    for name, value in os.environ.items()
    if name.startswith("CRYPTO_SECRET_V")
    and name.removeprefix("CRYPTO_SECRET_V").isdigit()
    and value
}
CRYPTO_SECRET_CURRENT = env.str("CRYPTO_SECRET_CURRENT", default="")

# Every operational knob (tomori/domain/knobs/), as one typed, frozen object: code
# reads it through tomori.domain.knobs.knobs(). Bad values do not raise here:
# tomori.checks reports them all, naming each variable.
TOMORI_KNOBS: Knobs
TOMORI_KNOBS, KNOB_ERRORS = load_knobs(os.environ)
if _redis_error := redis_url_error(REDIS_URL):
    KNOB_ERRORS.append(_redis_error)


def _bound_database_waits(db: dict, knobs: Knobs) -> None:  # type: ignore[type-arg]
    """Give every connection a connect, statement or busy timeout (unless set in the URL)."""
    options = db.setdefault("OPTIONS", {})
    if db["ENGINE"] in ("django.db.backends.sqlite3", "tomori.sqlite_backend"):
        options.setdefault("timeout", knobs.SQLITE_BUSY_TIMEOUT_SECONDS)
    elif db["ENGINE"] == "django.db.backends.postgresql":
        options.setdefault("connect_timeout", knobs.DB_CONNECT_TIMEOUT_SECONDS)
        given = options.get("options", "")
        if "statement_timeout" not in given:
            bound = f"-c statement_timeout={knobs.DB_STATEMENT_TIMEOUT_MS}"
            options["options"] = f"{given} {bound}".strip()


_bound_database_waits(DATABASES["default"], TOMORI_KNOBS)

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "discord": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        # A 4xx is already the server's own request line (runserver, gunicorn's
        # access log): django.request would repeat it. 5xx stay logged here.
        "django.request": {"level": "ERROR"},
    },
}
if (_metrics_file := TOMORI_KNOBS.METRICS_LOG_FILE) is not None:
    # JSON metric lines to their own file: the console stays readable. The
    # file (and its folders) appear with the first metric line, not here.
    LOGGING["formatters"]["bare"] = {"format": "%(message)s"}
    LOGGING["handlers"]["metrics_file"] = {
        "class": "metrics.log_file.MetricsFileHandler",
        "filename": str(_metrics_file),
        "formatter": "bare",
    }
    LOGGING["loggers"]["tomori.metrics"] = {
        "handlers": ["metrics_file"],
        "propagate": False,
    }

# Celery beat: the OpenRouter catalogs every quarter TTL (at least a minute),
# and the short-term-memory janitor daily.
CELERY_BEAT_SCHEDULE = {
    "refresh-openrouter-catalogs": {
        "task": "caches.refresh_openrouter_catalogs",
        "schedule": max(60.0, TOMORI_KNOBS.OPENROUTER_CATALOG_TTL_MS / 4000),
    },
    "purge-short-term-memory": {
        "task": "tomori.tasks.purge_short_term_memory",
        "schedule": 86_400.0,
    },
}
# Entries beat also sends once, this many seconds after it starts: its own first
# run of an entry comes one interval after start (90 minutes for the catalogs),
# so catalogs gone stale while beat was down would wait that long, and a
# newcomer would see beat do nothing in the first hour.
TOMORI_BEAT_AT_START = {"refresh-openrouter-catalogs": 30.0}
