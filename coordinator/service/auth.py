"""The auth service's writes and reads (docs/auth.md): clients and roles managed through the
API, their audit history, and their Pulse messages.

Every change is written with compare-and-set (a client on its version, the roles as one set
on theirs), with its audit entry and its Pulse message in the same transaction, then the
process's :class:`~coordinator.service.client_directory.ClientDirectory` reloads, so the
next request here already sees it (other replicas within a second). accessTokens are
generated here, encrypted before they reach the store, and returned only by
:meth:`AuthService.create_client` and :meth:`AuthService.reset_access_token`.

A scope check that depends on what is stored (updateClient and updateRole may add only
scopes the caller holds, and a role's former expansion counts as held) runs inside the
compare-and-set loop through the ``authorize`` callback, against the state it writes over.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence

import slugid

from coordinator.domain.clients import (
    MAX_DESCRIPTION_LENGTH,
    MAX_ID_LENGTH,
    MAX_SCOPES,
    AuditEntry,
    EntityType,
    Role,
    Roles,
    StoredClient,
)
from coordinator.domain.errors import Conflict, InputError, NotFound
from coordinator.domain.events import QueueEvent, auth_event
from coordinator.domain.listings import Key, Page, keyed_page
from coordinator.domain.roles import check_roles
from coordinator.domain.scopes import held_scopes, scope_compare
from coordinator.service.client_directory import ClientDirectory
from coordinator.service.encryption import Cipher
from coordinator.store.base import Store

log = logging.getLogger(__name__)

Authorize = Callable[[Sequence[str]], Awaitable[None]]
"""Checks that the caller holds the scopes a change adds; raises to refuse it."""

EXPIRY_BATCH = 100
"""How many expired clients one sweep deletes at most."""


def new_access_token() -> str:
    """A new accessToken: two slugids, 44 characters, as Taskcluster makes them."""
    return str(slugid.v4()) + str(slugid.v4())


def check_id(kind: str, value: str) -> None:
    """Refuse a clientId or roleId longer than :data:`MAX_ID_LENGTH` (the route's pattern has
    checked its characters)."""
    if len(value) > MAX_ID_LENGTH:
        raise InputError(f"{kind} is {len(value)} characters long; at most {MAX_ID_LENGTH}")


def check_scopes(scopes: Sequence[str]) -> None:
    """Taskcluster's rules beyond the schema's (printable ASCII): no scope ends in ``**``,
    and at most :data:`MAX_SCOPES` of them."""
    doubled = [scope for scope in scopes if scope.endswith("**")]
    if doubled:
        raise InputError(f"scopes must not end with `**`: {doubled[0]!r}")
    if len(scopes) > MAX_SCOPES:
        raise InputError(f"{len(scopes)} scopes given; a client or role lists at most {MAX_SCOPES}")


def _check_description(description: str) -> None:
    if len(description) > MAX_DESCRIPTION_LENGTH:
        raise InputError(f"description is longer than {MAX_DESCRIPTION_LENGTH} characters")


def _role_scopes(scopes: Sequence[str], description: str) -> tuple[str, ...]:
    """A role's scopes as stored (deduplicated, in Taskcluster's order), once they and its
    description pass the checks."""
    check_scopes(scopes)
    _check_description(description)
    return tuple(sorted(set(scopes), key=scope_compare))


def _find(roles: Roles, role_id: str) -> Role | None:
    return next((role for role in roles.roles if role.role_id == role_id), None)


class AuthService:
    """Clients and roles through the API.

    :param directory: the process's clients and roles, reloaded after each write.
    :param clock: epoch milliseconds.
    :param publish_events: write the auth service's Pulse messages to the outbox.
    """

    def __init__(
        self,
        *,
        store: Store,
        cipher: Cipher,
        directory: ClientDirectory,
        clock: Callable[[], int],
        publish_events: bool = False,
    ) -> None:
        self._store = store
        self._cipher = cipher
        self.directory = directory
        self._clock = clock
        self._publish_events = publish_events

    def _events(self, exchange: str, entity_id: str) -> list[QueueEvent]:
        return [auth_event(exchange, entity_id)] if self._publish_events else []

    def _audit(self, entity_type: EntityType, entity_id: str, by: str, action: str) -> AuditEntry:
        return AuditEntry(
            entity_type=entity_type,
            entity_id=entity_id,
            client_id=by,
            action_type=action,
            created=self._clock(),
        )

    def _refuse_static(self, client_id: str) -> None:
        if self.directory.is_static(client_id):
            raise InputError(
                f'clientId "{client_id}" is a static client (the clients file\'s, or "static/" '
                "which is reserved for them): change it in the clients file"
            )

    # --- clients ----------------------------------------------------------------------------

    async def get_client(self, client_id: str) -> StoredClient:
        """:raises NotFound: no such client (static clients are not shown)."""
        client = await self._store.get_client(client_id)
        if client is None:
            raise NotFound("Client not found")
        return client

    async def list_clients(
        self, *, prefix: str | None, limit: int, after: str | None
    ) -> Page[StoredClient, Key]:
        """The stored clients by clientId, those after ``after``, starting with ``prefix``."""
        clients = await self._store.list_clients(prefix=prefix, limit=limit + 1, after=after)
        return keyed_page(clients, limit, lambda client: (client.client_id,))

    async def create_client(
        self,
        client_id: str,
        *,
        description: str,
        expires: int,
        scopes: Sequence[str],
        delete_on_expiration: bool,
        by: str,
    ) -> tuple[StoredClient, str]:
        """A new client and its accessToken (the only time it is shown).

        :raises InputError: a static clientId, an id past the limit, unusable scopes.
        :raises Conflict: the client exists.
        """
        check_id("clientId", client_id)
        self._refuse_static(client_id)
        check_scopes(scopes)
        _check_description(description)
        token = new_access_token()
        now = self._clock()
        client = StoredClient(
            client_id=client_id,
            description=description,
            encrypted_access_token=self._cipher.encrypt(token.encode(), bound_to=client_id),
            scopes=tuple(sorted(set(scopes), key=scope_compare)),
            expires=expires,
            delete_on_expiration=delete_on_expiration,
            disabled=False,
            created=now,
            last_modified=now,
            last_date_used=now,
            last_rotated=now,
        )
        if not await self._store.insert_client(
            client,
            audit=self._audit("client", client_id, by, "created"),
            events=self._events("client-created", client_id),
        ):
            raise Conflict("Client already exists")
        log.info("client created clientId=%s by=%s", client_id, by)
        await self.directory.refresh()
        return client, token

    async def update_client(
        self,
        client_id: str,
        *,
        description: str,
        expires: int,
        scopes: Sequence[str] | None,
        delete_on_expiration: bool,
        by: str,
        authorize: Authorize,
    ) -> StoredClient:
        """Replace the client's description, expiry, deleteOnExpiration and (when given) its
        scopes; ``authorize`` is called with the scopes it adds.

        :raises NotFound: no such client.
        """
        self._refuse_static(client_id)
        if scopes is not None:
            check_scopes(scopes)
        _check_description(description)

        async def change(client: StoredClient) -> StoredClient:
            new_scopes = client.scopes
            if scopes is not None:
                new_scopes = tuple(sorted(set(scopes), key=scope_compare))
            await authorize([scope for scope in new_scopes if scope not in client.scopes])
            return dataclasses.replace(
                client,
                description=description,
                expires=expires,
                scopes=new_scopes,
                delete_on_expiration=delete_on_expiration,
            )

        return await self._change_client(client_id, change, by, "updated")

    async def set_disabled(self, client_id: str, disabled: bool, *, by: str) -> StoredClient:
        """Disable (or enable) the client: a disabled client's requests get a 401.

        :raises NotFound: no such client.
        """
        self._refuse_static(client_id)

        async def change(client: StoredClient) -> StoredClient:
            return dataclasses.replace(client, disabled=disabled)

        action = "client disabled" if disabled else "client enabled"
        return await self._change_client(client_id, change, by, action)

    async def reset_access_token(self, client_id: str, *, by: str) -> tuple[StoredClient, str]:
        """A new accessToken for the client; the old one stops working.

        :raises NotFound: no such client.
        """
        self._refuse_static(client_id)
        token = new_access_token()

        async def change(client: StoredClient) -> StoredClient:
            return dataclasses.replace(
                client,
                encrypted_access_token=self._cipher.encrypt(token.encode(), bound_to=client_id),
                last_rotated=self._clock(),
            )

        client = await self._change_client(client_id, change, by, "access token reset")
        return client, token

    async def _change_client(
        self,
        client_id: str,
        change: Callable[[StoredClient], Awaitable[StoredClient]],
        by: str,
        action: str,
    ) -> StoredClient:
        while True:
            current = await self.get_client(client_id)
            changed = dataclasses.replace(await change(current), last_modified=self._clock())
            stored = await self._store.update_client(
                changed,
                audit=self._audit("client", client_id, by, action),
                events=self._events("client-updated", client_id),
            )
            if stored is not None:
                log.info("client changed clientId=%s action=%r by=%s", client_id, action, by)
                await self.directory.refresh()
                return stored

    async def delete_client(self, client_id: str, *, by: str) -> None:
        """Delete the client; nothing when there is none (as Taskcluster)."""
        self._refuse_static(client_id)
        if await self._store.delete_client(
            client_id,
            audit=self._audit("client", client_id, by, "deleted"),
            events=self._events("client-deleted", client_id),
        ):
            log.info("client deleted clientId=%s by=%s", client_id, by)
            await self.directory.refresh()

    async def expire_clients(self) -> int:
        """Delete clients past their expiry that asked for it (``deleteOnExpiration``); how
        many."""
        expired = await self._store.expired_clients(self._clock(), EXPIRY_BATCH)
        deleted = 0
        for client in expired:
            if await self._store.delete_client(
                client.client_id,
                audit=self._audit("client", client.client_id, "queue-coordinator", "expired"),
                events=self._events("client-deleted", client.client_id),
            ):
                log.info("client expired and deleted clientId=%s", client.client_id)
                deleted += 1
        if deleted:
            await self.directory.refresh()
        return deleted

    # --- roles ------------------------------------------------------------------------------

    async def roles(self) -> Roles:
        return await self._store.get_roles()

    async def get_role(self, role_id: str) -> Role:
        """:raises NotFound: no such role."""
        role = _find(await self._store.get_roles(), role_id)
        if role is None:
            raise NotFound(f"Role with roleId '{role_id}' not found")
        return role

    async def create_role(
        self, role_id: str, *, scopes: Sequence[str], description: str, by: str
    ) -> Role:
        """A new role; repeating the call with the same scopes and description returns it.

        :raises InputError: an id past the limit, unusable scopes, a cycle or an expansion
            past the bound.
        :raises Conflict: another role of that id exists.
        """
        check_id("roleId", role_id)
        ordered = _role_scopes(scopes, description)
        while True:
            current = await self._store.get_roles()
            existing = _find(current, role_id)
            if existing is not None:
                if existing.scopes != ordered or existing.description != description:
                    raise Conflict(f"Role with roleId '{role_id}' already exists")
                return existing
            now = self._clock()
            role = Role(
                role_id=role_id,
                scopes=ordered,
                description=description,
                created=now,
                last_modified=now,
            )
            if await self._write_roles(current, (*current.roles, role), role_id, by, "created"):
                return role

    async def update_role(
        self,
        role_id: str,
        *,
        scopes: Sequence[str],
        description: str,
        by: str,
        authorize: Authorize,
    ) -> Role:
        """Replace the role's scopes and description; ``authorize`` is called with the scopes
        added that the role's former expansion did not already grant.

        :raises NotFound: no such role.
        :raises InputError: as :meth:`create_role`.
        """
        ordered = _role_scopes(scopes, description)
        while True:
            current = await self._store.get_roles()
            existing = _find(current, role_id)
            if existing is None:
                raise NotFound(f"Role with roleId '{role_id}' not found")
            former = held_scopes(self.directory.expand(existing.scopes))
            await authorize([scope for scope in ordered if not former.grants(scope)])
            role = dataclasses.replace(
                existing, scopes=ordered, description=description, last_modified=self._clock()
            )
            roles = tuple(role if r.role_id == role_id else r for r in current.roles)
            if await self._write_roles(current, roles, role_id, by, "updated"):
                return role

    async def delete_role(self, role_id: str, *, by: str) -> None:
        """Delete the role; nothing when there is none (as Taskcluster)."""
        while True:
            current = await self._store.get_roles()
            roles = tuple(r for r in current.roles if r.role_id != role_id)
            if len(roles) == len(current.roles):
                return
            if await self._write_roles(current, roles, role_id, by, "deleted"):
                return

    async def _write_roles(
        self, current: Roles, roles: Sequence[Role], role_id: str, by: str, action: str
    ) -> bool:
        """Write ``roles`` over ``current``; ``False`` when another write won meanwhile."""
        check_roles({role.role_id: role.scopes for role in roles})
        written = await self._store.write_roles(
            roles,
            expected_version=current.version,
            audit=[self._audit("role", role_id, by, action)],
            events=self._events(f"role-{action}", role_id),
        )
        if written is None:
            return False
        log.info("role %s roleId=%r by=%s", action, role_id, by)
        await self.directory.refresh()
        return True

    # --- audit history ----------------------------------------------------------------------

    async def entity_history(
        self, entity_type: str, entity_id: str, *, limit: int, after: tuple[int, int] | None
    ) -> Page[AuditEntry, Key]:
        """getEntityHistory: what was done to one client or role, oldest first."""
        entries = await self._store.audit_history(
            entity_type=entity_type,
            entity_id=entity_id,
            client_id=None,
            limit=limit + 1,
            after=after,
        )
        return keyed_page(entries, limit, lambda entry: (entry.created, entry.sequence))

    async def client_history(
        self, client_id: str, *, limit: int, after: tuple[int, int] | None
    ) -> Page[AuditEntry, Key]:
        """listAuditHistory: what one client did to clients and roles, oldest first."""
        entries = await self._store.audit_history(
            entity_type=None, entity_id=None, client_id=client_id, limit=limit + 1, after=after
        )
        return keyed_page(entries, limit, lambda entry: (entry.created, entry.sequence))
