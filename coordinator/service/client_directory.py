"""Who a clientId is, and what its scopes expand to: the one place authentication asks.

The directory answers from memory, because every authenticated request asks: the clients
file's clients (static, :mod:`coordinator.service.clients_file`) first, then the clients the
auth API keeps in the store, with every client's scopes expanded through the roles
(:mod:`coordinator.domain.roles`). It reloads the stored clients and roles whenever the
store's auth generation moves (a client or role written through any replica): the auth
refresher polls it about every 250 ms, and a write through this process reloads at once, so
a change is in force everywhere within a second. Its :attr:`~ClientDirectory.state` moves with
each reload of either, for the verifier's cache of credentials to drop what it derived before.

A client's scopes are expanded with ``assume:client-id:<clientId>`` added, so a role
``client-id:<clientId>`` (or a parameterized ``client-id:<prefix>*``) grants scopes to clients
by name. Anonymous callers hold the clients file's ``anonymousScopes`` plus the role
``anonymous``.

It also notes when each stored client was last used (at most one write per client per
:data:`LAST_USED_RESOLUTION_MS`, as Taskcluster's ``lastDateUsed``), for the refresher to write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coordinator.domain.clients import StoredClient
from coordinator.domain.roles import RoleExpansion
from coordinator.domain.scopes import normalize_scope_set
from coordinator.service.clients_file import Client, ClientRegistry
from coordinator.service.encryption import Cipher, UndecryptableValue
from coordinator.store.base import Store
from hawk_signing import Credentials

log = logging.getLogger(__name__)

LAST_USED_RESOLUTION_MS = 6 * 3600 * 1000
"""How stale a client's ``lastDateUsed`` may get before a use writes it (Taskcluster's)."""

ANONYMOUS_ROLE = "assume:anonymous"
"""What every caller without credentials holds, besides the clients file's anonymousScopes."""


@dataclass(frozen=True, kw_only=True, slots=True)
class KnownClient:
    """A client as authentication needs it.

    :param scopes: what the client holds (:meth:`ClientDirectory.client_scopes`).
    :param expires: epoch ms; ``None`` for a clients file's client, which never expires.
    """

    client_id: str
    access_token: str
    scopes: tuple[str, ...]
    expires: int | None
    disabled: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class _Snapshot:
    """The stored clients and the roles as of one auth generation."""

    generation: int
    clients: dict[str, StoredClient]
    tokens: dict[str, str]
    expansion: RoleExpansion


_EMPTY = _Snapshot(
    generation=-1,
    clients={},
    tokens={},
    expansion=RoleExpansion({}),
)


class ClientDirectory:
    """The static and the stored clients, and the roles, in this process.

    :param static: the clients file; ``None`` when authentication is off.
    :param clock: epoch milliseconds (for expiry and last use).
    """

    def __init__(self, static: ClientRegistry | None, *, clock: Callable[[], int]) -> None:
        self._static = static
        self._clock = clock
        self._store: Store | None = None
        self._cipher: Cipher | None = None
        self._snapshot = _EMPTY
        self._known: dict[str, KnownClient] = {}
        self._static_known: dict[str, tuple[Client, KnownClient]] = {}
        self._used: dict[str, int] = {}
        """Last uses to write at the next flush."""
        self._last_used: dict[str, int] = {}
        """Last uses noted since the last reload: a flush does not move the auth generation,
        so the snapshot keeps the use before them."""

    async def attach(self, store: Store, cipher: Cipher) -> None:
        """Read the stored clients and roles from ``store`` from now on (at start-up, before
        the first request)."""
        self._store, self._cipher = store, cipher
        await self.refresh()

    def is_static(self, client_id: str) -> bool:
        """Whether ``client_id`` is the clients file's (or reserved for it)."""
        if client_id.startswith("static/"):
            return True
        return self._static is not None and self._static.lookup(client_id) is not None

    @property
    def issuer(self) -> Credentials | None:
        """The clients file's issuer (signs claims' temporary credentials)."""
        return None if self._static is None else self._static.issuer

    @property
    def state(self) -> tuple[int, int]:
        """What every answer of the directory is derived from: the clients file's contents and
        the stored clients' and roles' auth generation. It moves whenever an answer may have
        changed, so a cache of them keyed by it is never stale."""
        file_generation = -1 if self._static is None else self._static.generation
        return file_generation, self._snapshot.generation

    def expand(self, scopes: Sequence[str]) -> tuple[str, ...]:
        """``scopes`` with everything their ``assume:`` scopes grant, normalized."""
        return self._snapshot.expansion.expand(scopes)

    def caller_scopes(self, scopes: Sequence[str]) -> tuple[str, ...]:
        """What a caller presenting ``scopes`` holds: them and what anonymous callers hold,
        expanded (Taskcluster grants every caller the ``anonymous`` role)."""
        return normalize_scope_set((*self.expand(scopes), *self.anonymous_scopes))

    def client_scopes(self, client_id: str, scopes: Sequence[str]) -> tuple[str, ...]:
        """What a client listing ``scopes`` holds when it authenticates."""
        return self.caller_scopes((*scopes, f"assume:client-id:{client_id}"))

    @property
    def anonymous_scopes(self) -> tuple[str, ...]:
        """What a request without credentials holds: the clients file's ``anonymousScopes``
        and the role ``anonymous``, expanded."""
        listed = () if self._static is None else self._static.anonymous_scopes
        return self.expand((*listed, ANONYMOUS_ROLE))

    def lookup(self, client_id: str) -> KnownClient | None:
        """The client ``client_id`` (static first), or ``None``."""
        if self._static is not None:
            client = self._static.lookup(client_id)
            if client is not None:
                cached = self._static_known.get(client_id)
                # The registry hands out a new Client when the file changed.
                if cached is not None and cached[0] is client:
                    return cached[1]
                static = KnownClient(
                    client_id=client.client_id,
                    access_token=client.access_token,
                    scopes=self.client_scopes(client.client_id, client.scopes),
                    expires=None,
                    disabled=False,
                )
                self._static_known[client_id] = (client, static)
                return static
        known = self._known.get(client_id)
        if known is None:
            stored = self._snapshot.clients.get(client_id)
            token = self._snapshot.tokens.get(client_id)
            if stored is None or token is None:
                return None
            known = KnownClient(
                client_id=client_id,
                access_token=token,
                scopes=self.client_scopes(client_id, stored.scopes),
                expires=stored.expires,
                disabled=stored.disabled,
            )
            self._known[client_id] = known
        return known

    def note_used(self, client_id: str) -> None:
        """Remember that ``client_id`` authenticated a request, for :meth:`flush_used`."""
        stored = self._snapshot.clients.get(client_id)
        if stored is None:
            return
        now = self._clock()
        last = self._last_used.get(client_id, stored.last_date_used)
        if now - last >= LAST_USED_RESOLUTION_MS:
            self._used[client_id] = self._last_used[client_id] = now

    async def flush_used(self) -> int:
        """Write the last uses noted since the last flush; how many clients."""
        if not self._used or self._store is None:
            return 0
        used, self._used = self._used, {}
        await self._store.mark_clients_used(used)
        return len(used)

    async def refresh(self) -> bool:
        """Reload the stored clients and roles if the store's auth generation moved; whether
        it reloaded."""
        if self._store is None or self._cipher is None:
            return False
        generation = await self._store.auth_generation()
        if generation == self._snapshot.generation:
            return False
        clients = await self._store.all_clients()
        roles = await self._store.get_roles()
        tokens: dict[str, str] = {}
        for client in clients:
            try:
                tokens[client.client_id] = self._cipher.decrypt(
                    client.encrypted_access_token, bound_to=client.client_id
                ).decode()
            except UndecryptableValue as error:
                log.error("client unusable clientId=%s reason=%s", client.client_id, error)
        self._snapshot = _Snapshot(
            generation=generation,
            clients={client.client_id: client for client in clients},
            tokens=tokens,
            expansion=RoleExpansion({role.role_id: role.scopes for role in roles.roles}),
        )
        self._known, self._static_known, self._last_used = {}, {}, {}
        return True
