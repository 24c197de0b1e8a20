"""The secrets part of the store contract (docs/secrets.md): secrets by name, their values
only as the service encrypted them, each write with its audit entry (in the auth service's
audit history) in the same transaction.
"""

from __future__ import annotations

import abc

from coordinator.domain.clients import AuditEntry
from coordinator.domain.secrets import StoredSecret


class SecretStore(abc.ABC):
    """Secrets and their expiry."""

    @abc.abstractmethod
    async def insert_secret(self, secret: StoredSecret, *, audit: AuditEntry) -> bool:
        """Store a new secret, and ``audit`` in the same transaction; ``False`` (nothing
        written) if one of that name exists, expired or not."""

    @abc.abstractmethod
    async def update_secret(self, secret: StoredSecret, *, audit: AuditEntry) -> bool:
        """Replace the value and ``expires`` of the stored secret of that name, and write
        ``audit`` in the same transaction; ``False`` (nothing written) if there is none."""

    @abc.abstractmethod
    async def get_secret(self, name: str) -> StoredSecret | None:
        """The secret, expired or not, or ``None``."""

    @abc.abstractmethod
    async def list_secrets(self, *, now: int, limit: int, after: str | None) -> list[str]:
        """Up to ``limit`` names (code-point order) of the secrets whose ``expires`` is not
        before ``now``, those after ``after`` (``None``: from the first)."""

    @abc.abstractmethod
    async def delete_secret(
        self, name: str, *, audit: AuditEntry, expired_before: int | None = None
    ) -> bool:
        """Delete the secret, and write ``audit`` in the same transaction; whether it existed
        (``False``: nothing written). With ``expired_before``, only if its ``expires`` is
        before it (the expiry sweep: a secret set again meanwhile stays)."""

    @abc.abstractmethod
    async def expired_secrets(self, now: int, limit: int) -> list[str]:
        """Up to ``limit`` names of secrets whose ``expires`` is before ``now``, the earliest
        expiry first."""
