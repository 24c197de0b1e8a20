"""Clients, roles and the audit history as the auth service keeps them (docs/auth.md): the
records the store holds, the identifiers' rules and the limits that keep a request's scope
check and a role's expansion bounded.

A *client* is a clientId with an accessToken and scopes. The clients file's clients are
*static*: the API shows none of them and changes none of them. Every other client lives in
the store, its accessToken encrypted (:attr:`StoredClient.encrypted_access_token`). A *role*
is a roleId with scopes: a caller holding ``assume:<roleId>`` holds them too (see
:mod:`coordinator.domain.roles`). Times are epoch milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

CLIENT_ID = re.compile(r"[A-Za-z0-9!@/:.+|_-]+")
"""What a clientId is (Taskcluster's pattern)."""

ROLE_ID = re.compile(r"[\x20-\x7e]+")
"""What a roleId is (Taskcluster's pattern): printable ASCII."""

MAX_ID_LENGTH = 256
"""The longest clientId or roleId: a URL segment, an index key and a scope's suffix."""

MAX_SCOPES = 1_000
"""The most scopes a client or a role lists itself."""

MAX_EXPANDED_SCOPES = 10_000
"""The most scopes one client's or role's expansion may reach; a role change that takes any
client or role past it is refused, so a request's scope check stays bounded."""

MAX_DESCRIPTION_LENGTH = 10_240
"""Taskcluster's limit on a client's or a role's description."""

STATIC_PREFIX = "static/"
"""The clientId prefix reserved for the clients file's clients."""

EntityType = Literal["client", "role", "secret"]
"""What an audit entry is about (a secret's entries are the secrets service's, docs/secrets.md)."""

CLIENT_ACTIONS = (
    "created",
    "updated",
    "deleted",
    "client enabled",
    "client disabled",
    "access token reset",
    "expired",
)
"""The ``actionType`` of a client's audit entries (Taskcluster's words)."""

ROLE_ACTIONS = ("created", "updated", "deleted")
"""The ``actionType`` of a role's audit entries."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredClient:
    """A client the auth API manages. ``version`` is its compare-and-set version (1 when
    created); ``encrypted_access_token`` is what the service's cipher made of the token."""

    client_id: str
    description: str
    encrypted_access_token: bytes
    scopes: tuple[str, ...]
    expires: int
    delete_on_expiration: bool
    disabled: bool
    created: int
    last_modified: int
    last_date_used: int
    last_rotated: int
    version: int = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class Role:
    """A role: holding ``assume:<role_id>`` grants ``scopes``."""

    role_id: str
    scopes: tuple[str, ...]
    description: str
    created: int
    last_modified: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Roles:
    """Every role, and the version the store wrote them at: roles are written as one set
    with compare-and-set on it, because whether a change is allowed (no cycle, no
    expansion past the bound) depends on all of them."""

    roles: tuple[Role, ...]
    version: int


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditEntry:
    """One change to a client or a role: who (``client_id``) did what (``action_type``) to
    which entity, when. ``sequence`` orders entries of the same millisecond (the store
    assigns it; 0 until stored)."""

    entity_type: EntityType
    entity_id: str
    client_id: str
    action_type: str
    created: int
    sequence: int = 0
