"""Settings for the test suite: the real settings with a test secret key."""

import os

# A developer's .env (DEBUG, REDIS_URL, ...) must not change what the tests run.
os.environ.setdefault("TOMORI_ENV_FILE", os.devnull)
os.environ.setdefault("SECRET_KEY", "test-only-secret-key")
os.environ.setdefault("CRYPTO_SECRET_V1", "test-only-crypto-secret-v1")
os.environ.setdefault("CRYPTO_SECRET_CURRENT", "1")

from tomori.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Under pytest-xdist each worker, and every process it starts with these
# settings (they inherit PYTEST_XDIST_WORKER), takes a default bus channel
# of its own: the workers' buses, shard-lock keys and worker snapshots on the
# shared Redis never meet. A channel set in the environment still wins.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _XDIST_WORKER and not os.environ.get("TOMORI_BUS_CHANNEL"):
    TOMORI_BUS_CHANNEL = f"{TOMORI_BUS_CHANNEL}:{_XDIST_WORKER}"  # noqa: F405
