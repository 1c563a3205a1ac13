"""Settings for the test suite: the real settings with a test secret key."""

import os

# A developer's .env (DEBUG, REDIS_URL, ...) must not change what the tests run.
os.environ.setdefault("TOMORI_ENV_FILE", os.devnull)
os.environ.setdefault("SECRET_KEY", "test-only-secret-key")
os.environ.setdefault("CRYPTO_SECRET_V1", "test-only-crypto-secret-v1")
os.environ.setdefault("CRYPTO_SECRET_CURRENT", "1")

from tomori.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
