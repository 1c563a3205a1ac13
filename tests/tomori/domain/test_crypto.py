"""Token encryption: round trip, context binding, tampering, rotation, masking."""

from __future__ import annotations

import pickle

import pytest
from django.test import override_settings

from tomori.checks import check_crypto_keys
from tomori.domain.crypto import (
    CryptoNotConfigured,
    EncryptedSecret,
    SecretDecryptionError,
    SecretToken,
    current_key_version,
    decrypt_secret,
    derive_fernet_key,
    encrypt_secret,
    needs_rotation,
    rotate_secret,
)

TOKEN = "abcDEF123-very-secret-webhook-token"
V1 = {1: "first-secret-for-tests"}
V1_V2 = {1: "first-secret-for-tests", 2: "second-secret-for-tests"}


def test_secret_token_never_shows_its_value() -> None:
    token = SecretToken(TOKEN)
    for text in (repr(token), str(token), f"{token}", f"{token}", repr([token])):
        assert TOKEN not in text
    assert token.reveal() == TOKEN


def test_secret_token_refuses_pickling() -> None:
    with pytest.raises(TypeError):
        pickle.dumps(SecretToken(TOKEN))


def test_encrypted_token_round_trips_and_hides_plaintext() -> None:
    stored = encrypt_secret(SecretToken(TOKEN), context="webhook:1")
    assert TOKEN not in stored.ciphertext
    assert stored.key_version == current_key_version()
    assert decrypt_secret(stored, context="webhook:1").reveal() == TOKEN


def test_ciphertext_of_another_record_does_not_decrypt() -> None:
    stored = encrypt_secret(SecretToken(TOKEN), context="webhook:1")
    with pytest.raises(SecretDecryptionError):
        decrypt_secret(stored, context="webhook:2")


def test_tampered_ciphertext_fails_without_leaking() -> None:
    stored = encrypt_secret(SecretToken(TOKEN), context="c")
    flipped = stored.ciphertext[:-5] + ("A" if stored.ciphertext[-5] != "A" else "B")
    tampered = EncryptedSecret(flipped + stored.ciphertext[-4:], stored.key_version)
    with pytest.raises(SecretDecryptionError) as raised:
        decrypt_secret(tampered, context="c")
    assert TOKEN not in str(raised.value)
    assert raised.value.__cause__ is None


def test_each_version_derives_its_own_key() -> None:
    assert derive_fernet_key("same", 1) != derive_fernet_key("same", 2)
    assert derive_fernet_key("same", 1) == derive_fernet_key("same", 1)


def test_rows_under_an_old_key_stay_readable_and_rotate() -> None:
    with override_settings(CRYPTO_SECRETS=V1, CRYPTO_SECRET_CURRENT="1"):
        old = encrypt_secret(SecretToken(TOKEN), context="c")
    with override_settings(CRYPTO_SECRETS=V1_V2, CRYPTO_SECRET_CURRENT="2"):
        assert decrypt_secret(old, context="c").reveal() == TOKEN
        assert needs_rotation(old)
        new = rotate_secret(old)
        assert new.key_version == 2 and not needs_rotation(new)
    with override_settings(CRYPTO_SECRETS={2: V1_V2[2]}, CRYPTO_SECRET_CURRENT="2"):
        assert decrypt_secret(new, context="c").reveal() == TOKEN
        with pytest.raises(SecretDecryptionError):
            decrypt_secret(old, context="c")


def test_missing_current_key_refuses_to_encrypt() -> None:
    with (
        override_settings(CRYPTO_SECRET_CURRENT=""),
        pytest.raises(CryptoNotConfigured, match="CRYPTO_SECRET_CURRENT"),
    ):
        encrypt_secret(SecretToken(TOKEN), context="c")


def test_production_without_keys_fails_the_system_check() -> None:
    with override_settings(DEBUG=False, CRYPTO_SECRETS={}, CRYPTO_SECRET_CURRENT=""):
        errors = check_crypto_keys()
    assert [e.id for e in errors] == ["caches.E002"]
    assert "CRYPTO_SECRET_V1" in errors[0].msg


def test_current_version_without_its_secret_fails_the_system_check() -> None:
    with override_settings(CRYPTO_SECRETS=V1, CRYPTO_SECRET_CURRENT="2"):
        assert [e.id for e in check_crypto_keys()] == ["caches.E002"]
