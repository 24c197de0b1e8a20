"""The secrets service's writes and reads (docs/secrets.md): secrets set, read, listed and
removed through the API, and deleted once expired.

A value is encrypted here, bound to its secret's name (``secret:<name>``, so a ciphertext
copied onto another row does not decrypt), before it reaches the store, and decrypted only
for :meth:`SecretService.get_secret`. It is never logged: the log lines and the audit entries
(written with each change in its transaction, in the auth service's audit history under
entity type ``secret``) name the secret and who changed it, nothing more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from coordinator.domain.clients import AuditEntry
from coordinator.domain.errors import NotFound
from coordinator.domain.json_text import compact_bytes, exact_loads
from coordinator.domain.listings import Key, Page, keyed_page
from coordinator.domain.secrets import SECRETS_CLIENT_ID, StoredSecret, check_name
from coordinator.service.encryption import Cipher, UndecryptableValue
from coordinator.store.base import Store

log = logging.getLogger(__name__)

EXPIRY_BATCH = 100
"""How many expired secrets one sweep deletes at most (a full sweep runs again at once)."""

NOT_FOUND = "Secret not found"
"""Upstream's message for a secret that does not exist or has expired (the same for both, so
an expired secret's name is not confirmed either)."""


class SecretUnreadable(Exception):
    """A stored secret this coordinator's key does not decrypt (the row was altered, or
    written under another key): the operator's problem, not the caller's."""


def bound_to(name: str) -> str:
    """What a secret's ciphertext is bound to."""
    return f"secret:{name}"


class SecretService:
    """Secrets through the API.

    :param cipher: the coordinator's key, which also encrypts the auth API's accessTokens.
    :param clock: epoch milliseconds.
    """

    def __init__(self, *, store: Store, cipher: Cipher, clock: Callable[[], int]) -> None:
        self._store = store
        self._cipher = cipher
        self._clock = clock

    def _audit(self, name: str, by: str, action: str) -> AuditEntry:
        return AuditEntry(
            entity_type="secret",
            entity_id=name,
            client_id=by,
            action_type=action,
            created=self._clock(),
        )

    async def set_secret(self, name: str, value: dict[str, Any], *, expires: int, by: str) -> str:
        """Create the secret or replace its value and expiry; ``created`` or ``updated``.

        :raises InputError: a name no scope can name.
        """
        check_name(name)
        secret = StoredSecret(
            name=name,
            encrypted_value=self._cipher.encrypt(compact_bytes(value), bound_to=bound_to(name)),
            expires=expires,
        )
        while True:  # another replica may insert or delete it between the two writes
            if await self._store.insert_secret(secret, audit=self._audit(name, by, "created")):
                action = "created"
                break
            if await self._store.update_secret(secret, audit=self._audit(name, by, "updated")):
                action = "updated"
                break
        log.info("secret %s name=%r by=%s", action, name, by)
        return action

    async def remove_secret(self, name: str, *, by: str) -> bool:
        """Delete the secret; whether it existed (``False``: nothing written, no audit entry).

        :raises InputError: a name no scope can name.
        """
        check_name(name)
        removed = await self._store.delete_secret(name, audit=self._audit(name, by, "deleted"))
        if removed:
            log.info("secret deleted name=%r by=%s", name, by)
        return removed

    async def get_secret(self, name: str) -> tuple[dict[str, Any], int]:
        """The secret's value and ``expires``.

        :raises InputError: a name no scope can name.
        :raises NotFound: it does not exist, or has expired.
        :raises SecretUnreadable: the stored value does not decrypt with this key.
        """
        check_name(name)
        secret = await self._store.get_secret(name)
        if secret is None or secret.expires < self._clock():
            raise NotFound(NOT_FOUND)
        try:
            clear = self._cipher.decrypt(secret.encrypted_value, bound_to=bound_to(name))
        except UndecryptableValue as error:
            log.error("secret unreadable name=%r reason=%s", name, error)
            raise SecretUnreadable(
                f"the secret {name!r} does not decrypt with this coordinator's encryption key"
            ) from None
        value: dict[str, Any] = exact_loads(clear.decode("utf-8"))
        return value, secret.expires

    async def list_secrets(self, *, limit: int, after: str | None) -> Page[str, Key]:
        """A page of the names of the secrets not expired, in code-point order."""
        names = await self._store.list_secrets(now=self._clock(), limit=limit + 1, after=after)
        return keyed_page(names, limit, lambda name: (name,))

    async def expire_secrets(self) -> int:
        """Delete a batch of expired secrets, each with an ``expired`` audit entry; how
        many."""
        now = self._clock()
        deleted = 0
        for name in await self._store.expired_secrets(now, EXPIRY_BATCH):
            audit = self._audit(name, SECRETS_CLIENT_ID, "expired")
            if await self._store.delete_secret(name, audit=audit, expired_before=now):
                log.info("secret expired and deleted name=%r", name)
                deleted += 1
        return deleted
