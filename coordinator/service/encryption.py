"""Values encrypted at rest (the API-managed clients' accessTokens and the secrets service's
values): the key, its file, and AES-256-GCM through ``cryptography``.

The key is 32 random bytes, given as ``COORDINATOR_ENCRYPTION_KEY`` (base64) or kept in a file
(``<data dir>/encryption.key``, created with mode 0600 on first start). Every replica of one
store must have the same key: :meth:`Cipher.check_against` compares the key's fingerprint with
the one the store recorded when the first replica started, so a replica with another key
stops at start-up instead of failing to read every token and secret. Every key problem
(malformed, unreadable, another replica's) is a :class:`ConfigurationError`: one line and exit
status 2 from ``queue-coordinator serve``.

A ciphertext is ``version byte (1) | 12-byte nonce | AES-GCM(ciphertext + tag)``; the
associated data binds it to what it encrypts (a clientId, or ``secret:<name>``), so a value
copied onto another row does not decrypt.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import os
import secrets
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from coordinator.config import ConfigurationError

if TYPE_CHECKING:
    from coordinator.store.base import Store

KEY_BYTES = 32
_VERSION = b"\x01"
_NONCE_BYTES = 12
_FINGERPRINT_SECRET = "encryption-key-fingerprint"


class UndecryptableValue(Exception):
    """A ciphertext this key did not make (another key, or altered bytes)."""


class Cipher:
    """Encrypts and decrypts values with one key."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"an encryption key is {KEY_BYTES} bytes, not {len(key)}")
        self._aead = AESGCM(key)
        self._fingerprint = hmac.new(key, b"queue-coordinator key check", hashlib.sha256)

    def encrypt(self, value: bytes, *, bound_to: str) -> bytes:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        return _VERSION + nonce + self._aead.encrypt(nonce, value, bound_to.encode())

    def decrypt(self, ciphertext: bytes, *, bound_to: str) -> bytes:
        if ciphertext[:1] != _VERSION:
            raise UndecryptableValue("unknown ciphertext version")
        nonce, sealed = ciphertext[1 : 1 + _NONCE_BYTES], ciphertext[1 + _NONCE_BYTES :]
        try:
            return self._aead.decrypt(nonce, sealed, bound_to.encode())
        except InvalidTag:
            raise UndecryptableValue("the value was encrypted with another key") from None

    @property
    def fingerprint(self) -> str:
        """What identifies the key without revealing it."""
        return self._fingerprint.hexdigest()[:32]

    async def check_against(self, store: Store) -> None:
        """Raise :class:`ConfigurationError` when the store's values were encrypted with
        another key (the first replica to start records its key's fingerprint)."""
        recorded = await store.shared_secret(_FINGERPRINT_SECRET, new=self.fingerprint)
        if not hmac.compare_digest(recorded, self.fingerprint):
            raise ConfigurationError(
                "the encryption key differs from the one this store's accessTokens and "
                "secrets were encrypted with: give every replica the same "
                "COORDINATOR_ENCRYPTION_KEY (or the same COORDINATOR_ENCRYPTION_KEY_FILE)"
            )


def load_key(*, value: str | None, path: Path) -> bytes:
    """The key: ``value`` (base64 of 32 bytes) when given, else the file at ``path``, created
    with a new random key (mode 0600) when it does not exist.

    :raises ConfigurationError: a value or file that is not base64 of 32 bytes, or a file
        that cannot be read or written.
    """
    if value is not None:
        return _decode(value, "COORDINATOR_ENCRYPTION_KEY")
    try:
        if not path.exists():
            _create(path)
        return _decode(path.read_text(encoding="ascii").strip(), f"encryption key file {path}")
    except OSError as error:
        raise ConfigurationError(
            f"cannot read or create the encryption key file {path}: {error}; point "
            "COORDINATOR_ENCRYPTION_KEY_FILE at a writable place or set "
            "COORDINATOR_ENCRYPTION_KEY"
        ) from None


def new_key_text() -> str:
    """A new key as ``COORDINATOR_ENCRYPTION_KEY`` takes it."""
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def _decode(text: str, where: str) -> bytes:
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise ConfigurationError(
            f"{where} is not base64 of {KEY_BYTES} bytes; make one with "
            "`queue-coordinator encryption-key`"
        )
    return key


def _create(path: Path) -> None:
    """Write a new key at ``path`` atomically, never replacing one another process wrote."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".encryption-", suffix=".key")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write(new_key_text() + "\n")
            file.flush()
            os.fsync(file.fileno())
        # Another replica or process may have created it first: then theirs is the key.
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        os.unlink(temporary)
