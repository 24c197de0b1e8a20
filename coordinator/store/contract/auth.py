"""The auth part of the store contract: the clients the auth API manages, written with
compare-and-set, the roles, written as one set with compare-and-set on its version, the audit
history of both, and the generation that tells every replica to reload them.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence

from coordinator.domain.clients import AuditEntry, Role, Roles, StoredClient
from coordinator.domain.events import QueueEvent


class AuthStore(abc.ABC):
    """Clients, roles, their audit history and the auth generation."""

    @abc.abstractmethod
    async def insert_client(
        self, client: StoredClient, *, audit: AuditEntry, events: Sequence[QueueEvent] = ()
    ) -> bool:
        """Store a new client (``version`` 1), and ``audit`` and ``events`` in the same
        transaction, which bumps the auth generation; ``False`` (nothing written) if one of
        that clientId exists."""

    @abc.abstractmethod
    async def get_client(self, client_id: str) -> StoredClient | None:
        """The client, or ``None``."""

    @abc.abstractmethod
    async def list_clients(
        self, *, prefix: str | None, limit: int, after: str | None
    ) -> list[StoredClient]:
        """Up to ``limit`` clients by clientId (code-point order), those after ``after``
        (``None``: from the first) whose clientId starts with ``prefix`` (``None``: any); a
        prefix is a prefix, ``_`` and ``%`` in it included."""

    @abc.abstractmethod
    async def all_clients(self) -> list[StoredClient]:
        """Every client, by clientId."""

    @abc.abstractmethod
    async def update_client(
        self, client: StoredClient, *, audit: AuditEntry, events: Sequence[QueueEvent] = ()
    ) -> StoredClient | None:
        """Write ``client`` (all but its ``created``) if the stored version is still
        ``client.version``, and ``audit`` and ``events`` in the same transaction, which bumps
        the auth generation; the stored client (its version one more; its ``last_date_used``
        the later of the stored one and ``client``'s), or ``None`` (nothing written) when it
        changed meanwhile or is gone."""

    @abc.abstractmethod
    async def delete_client(
        self, client_id: str, *, audit: AuditEntry, events: Sequence[QueueEvent] = ()
    ) -> bool:
        """Delete the client, and write ``audit`` and ``events`` in the same transaction,
        which bumps the auth generation; whether it existed (``False``: nothing written). Its
        audit history stays."""

    @abc.abstractmethod
    async def expired_clients(self, now: int, limit: int) -> list[StoredClient]:
        """Up to ``limit`` clients to delete on expiration whose ``expires`` is before
        ``now``, the earliest expiry first."""

    @abc.abstractmethod
    async def mark_clients_used(self, used: Mapping[str, int]) -> None:
        """Raise each named client's ``last_date_used`` to its time in ``used`` (a later stored
        time stays; an unknown clientId is skipped). Neither the clients' versions nor the
        auth generation change, and no audit entry is written."""

    @abc.abstractmethod
    async def get_roles(self) -> Roles:
        """Every role, by roleId (code-point order), and the version they were written at (0
        before any :meth:`write_roles`)."""

    @abc.abstractmethod
    async def write_roles(
        self,
        roles: Sequence[Role],
        *,
        expected_version: int,
        audit: Sequence[AuditEntry],
        events: Sequence[QueueEvent] = (),
    ) -> Roles | None:
        """Replace every role with ``roles`` if the roles' stored version is still
        ``expected_version``, and ``audit`` and ``events`` in the same transaction, which bumps
        the auth generation; the roles as stored (by roleId, the version one more), or ``None``
        (nothing written) when another write won meanwhile.

        :raises ValueError: two of ``roles`` have one roleId (nothing written).
        """

    @abc.abstractmethod
    async def auth_generation(self) -> int:
        """A counter that every write of a client (insert, update, delete) or of the roles
        increases in its transaction, and nothing else: a replica that sees it change reloads
        the clients and roles. One read of one row, cheap enough to poll several times a
        second."""

    @abc.abstractmethod
    async def audit_history(
        self,
        *,
        entity_type: str | None,
        entity_id: str | None,
        client_id: str | None,
        limit: int,
        after: tuple[int, int] | None,
    ) -> list[AuditEntry]:
        """Up to ``limit`` audit entries by ``(created, sequence)``, those after ``after``
        (``None``: from the first): of the entity ``(entity_type, entity_id)`` if
        ``entity_id`` is given (getEntityHistory), else the changes ``client_id`` made
        (listAuditHistory). A filter given besides the one that selects narrows it: entries
        of that client only, or of that entity type only. Entries outlive their entity.

        :raises ValueError: neither ``entity_id`` nor ``client_id``, or ``entity_id`` without
            ``entity_type``.
        """
