"""The settings read in tomori/settings.py itself (not knobs), for the settings doc.

These are Django's and the deployment's own (secrets, database, Redis, hosts),
read with django-environ where they are used; each row only documents one.
"""

from __future__ import annotations

from typing import NamedTuple


class ServiceSetting(NamedTuple):
    """One documented variable: its name(s), default and effect, as Markdown."""

    name: str
    default: str
    effect: str


SERVICE_SETTINGS: tuple[ServiceSetting, ...] = (
    ServiceSetting(
        "`DEBUG`",
        "`false`",
        "Development mode (1/true/yes/on or 0/false/no/off, nothing else). Allows the built-in dev `SECRET_KEY` and missing crypto keys.",
    ),
    ServiceSetting(
        "`SECRET_KEY`",
        "none",
        "Required unless `DEBUG`; production refuses to start without it.",
    ),
    ServiceSetting(
        "`ALLOWED_HOSTS`",
        "`127.0.0.1,localhost` in DEBUG, else empty",
        "Host names the admin answers to.",
    ),
    ServiceSetting(
        "`CSRF_TRUSTED_ORIGINS`",
        "empty",
        "Origins trusted for admin POSTs behind a proxy.",
    ),
    ServiceSetting(
        "`DATABASE_URL`",
        "`sqlite:///var/tomori.sqlite3`",
        "Database; use PostgreSQL in production (`postgres://user@host:5432/db`).",
    ),
    ServiceSetting(
        "`CONN_MAX_AGE`",
        "`0`",
        "Seconds to keep database connections open.",
    ),
    ServiceSetting(
        "`REDIS_URL`",
        "unset",
        "Redis for the invalidation bus, live worker snapshots and Celery. Unset: in-process bus, eager Celery.",
    ),
    ServiceSetting(
        "`TOMORI_BUS_CHANNEL`",
        "`tomori:bus:db<N>`, N = the database number of `REDIS_URL` (0 if none)",
        "Redis pub/sub channel of the bus. Pub/sub ignores the database number, so the default carries it: two deployments on one Redis server with different db numbers do not exchange invalidations. An explicit value wins. Upgrading from a release whose default was `tomori:bus`: set `TOMORI_BUS_CHANNEL=tomori:bus` until every process runs the new release, or old and new processes miss each other's invalidations.",
    ),
    ServiceSetting(
        "`TOMORI_WORKER_ID`",
        "host:pid(:shard)",
        "Name a bot worker reports under.",
    ),
    ServiceSetting(
        "`CRYPTO_SECRET_V1`, `CRYPTO_SECRET_V2`, ...",
        "none (required unless `DEBUG`)",
        "Versioned secrets that encrypt stored webhook tokens. A stored token whose version has no secret here (a rolling rotation, a rollback) is kept, never deleted: that channel uses a webhook held in memory only until the secret is back. `runbot`, `manage.py check --database default` and the cache dashboard report such rows (warning `caches.W010`, with their count per version).",
    ),
    ServiceSetting(
        "`CRYPTO_SECRET_CURRENT`",
        "none (required unless `DEBUG`)",
        "Version n of the `CRYPTO_SECRET_V<n>` new tokens are encrypted with; rows under older versions are re-encrypted on read.",
    ),
    ServiceSetting(
        "`LOG_LEVEL`",
        "`INFO`",
        "Root log level.",
    ),
    ServiceSetting(
        "`TOMORI_ENV_FILE`",
        "`<repo>/.env`",
        "The env file settings read (values in the environment win); set, it must exist (`/dev/null`: none). `make test` uses `/dev/null`.",
    ),
    ServiceSetting(
        "`TOMORI_ADMIN_PORT`",
        "`8000`",
        "`make run` only: the port of the admin's runserver on 127.0.0.1 (Procfile).",
    ),
)
