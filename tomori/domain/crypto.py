"""Encryption of stored secrets (webhook tokens) under versioned, rotatable keys.

Keys come from the settings `CRYPTO_SECRETS` ({version: secret}, read from
`CRYPTO_SECRET_V<n>`) and `CRYPTO_SECRET_CURRENT` (the version new ciphertext
is written under). Each secret is stretched into a Fernet key with
HKDF-SHA256 (32 bytes, a fixed salt, and `tomori:crypto:v<n>` as info), so an
operator can use any long random string and two versions never share a key
even if their secrets are equal.

Every ciphertext row remembers the version it was written under. Reading a row
under an old version decrypts with that version's key and re-encrypts with the
current one (`MultiFernet.rotate`); a row whose version is not configured
raises `KeyVersionMissing`, one whose ciphertext fails authentication
`SecretDecryptionError` (its parent). Either may be a configuration error (a
rolled-back rotation, a mistyped secret), so callers keep such rows rather
than delete them. The plaintext carries a context string (the webhook id), so a
ciphertext copied onto another row does not decrypt there.

Plaintext secrets travel as `SecretToken`, whose repr and str are masked, so a
token that reaches a log line, an exception or a metric payload shows as
`SecretToken('••••••')`.
"""

from __future__ import annotations

import base64
import functools
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

_HKDF_SALT = b"tomori:stored-secret-encryption"
_CONTEXT_SEPARATOR = "\x00"
MASK = "••••••"


class SecretToken:
    """A plaintext secret whose repr and str never show it; `reveal()` does."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise ValueError("a SecretToken needs a non-empty string")
        self._value = value

    def reveal(self) -> str:
        """Return the plaintext, for the one call that must send it."""
        return self._value

    def __repr__(self) -> str:
        return f"SecretToken({MASK!r})"

    def __str__(self) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SecretToken):
            return NotImplemented
        return self._value == other._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> str:
        # Pickling would write the plaintext wherever the pickle goes
        # (a Celery payload, a cache backend); refuse instead.
        raise TypeError("SecretToken cannot be pickled")


class CryptoNotConfigured(ImproperlyConfigured):
    """No current encryption key is set (see system check caches.E002)."""


class SecretDecryptionError(Exception):
    """A stored ciphertext cannot be decrypted (unknown key, tampered, other row)."""


class KeyVersionMissing(SecretDecryptionError):
    """The ciphertext's key version has no CRYPTO_SECRET_V<n> in this process."""

    def __init__(self, version: int) -> None:
        super().__init__(f"no CRYPTO_SECRET_V{version} is set")
        self.version = version


@dataclass(frozen=True, slots=True)
class EncryptedSecret:
    """A ciphertext and the key version it was written under."""

    ciphertext: str
    key_version: int


def derive_fernet_key(secret: str, version: int) -> bytes:
    """Return the Fernet key (urlsafe base64 of 32 bytes) for one secret version."""
    hkdf = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=_HKDF_SALT,
        info=f"tomori:crypto:v{version}".encode(),
    )
    return base64.urlsafe_b64encode(hkdf.derive(secret.encode()))


@functools.lru_cache(maxsize=16)
def _fernet(secret: str, version: int) -> Fernet:
    # Keyed by the secret itself, so override_settings in tests and a
    # rotated secret never reuse a stale derived key.
    return Fernet(derive_fernet_key(secret, version))


def crypto_configured() -> bool:
    """Tell whether a current key is set (DEBUG may run without one)."""
    try:
        current_key_version()
    except CryptoNotConfigured:
        return False
    return True


def current_key_version() -> int:
    """Return the version new ciphertext is written under."""
    raw = str(settings.CRYPTO_SECRET_CURRENT or "").strip()
    if not raw.isdigit() or int(raw) not in settings.CRYPTO_SECRETS:
        raise CryptoNotConfigured(
            "CRYPTO_SECRET_CURRENT must name a set CRYPTO_SECRET_V<n> "
            f"(current={raw!r}, set versions={sorted(settings.CRYPTO_SECRETS)})."
        )
    return int(raw)


def _key_for(version: int) -> Fernet:
    secret = settings.CRYPTO_SECRETS.get(version)
    if not secret:
        raise KeyVersionMissing(version)
    return _fernet(secret, version)


def configured_key_versions() -> frozenset[int]:
    """Return the key versions this process has a secret for."""
    return frozenset(v for v, secret in settings.CRYPTO_SECRETS.items() if secret)


def encrypt_secret(secret: SecretToken, *, context: str) -> EncryptedSecret:
    """Encrypt `secret` under the current key, bound to `context`."""
    version = current_key_version()
    plaintext = f"{context}{_CONTEXT_SEPARATOR}{secret.reveal()}".encode()
    ciphertext = _key_for(version).encrypt(plaintext).decode("ascii")
    return EncryptedSecret(ciphertext=ciphertext, key_version=version)


def decrypt_secret(stored: EncryptedSecret, *, context: str) -> SecretToken:
    """Decrypt a stored secret written under `stored.key_version` for `context`."""
    try:
        plaintext = _key_for(stored.key_version).decrypt(stored.ciphertext.encode())
    except (InvalidToken, ValueError, TypeError):
        # `from None`: the cryptography exception carries nothing useful and
        # the chained traceback would only add noise near secret material.
        raise SecretDecryptionError(
            f"ciphertext under key v{stored.key_version} failed authentication"
        ) from None
    found_context, _, value = plaintext.decode().partition(_CONTEXT_SEPARATOR)
    if found_context != context or not value:
        raise SecretDecryptionError("ciphertext belongs to another record")
    return SecretToken(value)


def needs_rotation(stored: EncryptedSecret) -> bool:
    """Tell whether `stored` was written under a key other than the current one."""
    return stored.key_version != current_key_version()


def rotate_secret(stored: EncryptedSecret) -> EncryptedSecret:
    """Re-encrypt `stored` under the current key (raises SecretDecryptionError)."""
    version = current_key_version()
    rotator = MultiFernet([_key_for(version), _key_for(stored.key_version)])
    try:
        ciphertext = rotator.rotate(stored.ciphertext.encode()).decode("ascii")
    except InvalidToken:
        raise SecretDecryptionError(
            f"ciphertext under key v{stored.key_version} failed authentication"
        ) from None
    return EncryptedSecret(ciphertext=ciphertext, key_version=version)
