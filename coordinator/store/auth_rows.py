"""Mapping between the auth service's records (:mod:`coordinator.domain.clients`) and the
``auth_clients``, ``auth_roles`` and ``auth_audit`` tables' columns, the same for every driver
(scopes are compact JSON text; SQLite gives booleans back as integers)."""

from __future__ import annotations

from typing import Any

import orjson

from coordinator.domain.clients import AuditEntry, Role, StoredClient
from coordinator.domain.json_text import compact
from coordinator.store.rows import Row


def client_columns(client: StoredClient) -> dict[str, Any]:
    """Every column, by name (``version`` the one the row holds now)."""
    return {
        "client_id": client.client_id,
        "description": client.description,
        "encrypted_access_token": client.encrypted_access_token,
        "scopes": compact(list(client.scopes)),
        "expires": client.expires,
        "delete_on_expiration": client.delete_on_expiration,
        "disabled": client.disabled,
        "created": client.created,
        "last_modified": client.last_modified,
        "last_date_used": client.last_date_used,
        "last_rotated": client.last_rotated,
        "version": client.version,
    }


def client_from_row(row: Row) -> StoredClient:
    return StoredClient(
        client_id=row["client_id"],
        description=row["description"],
        encrypted_access_token=bytes(row["encrypted_access_token"]),
        scopes=_scopes(row["scopes"]),
        expires=row["expires"],
        delete_on_expiration=bool(row["delete_on_expiration"]),
        disabled=bool(row["disabled"]),
        created=row["created"],
        last_modified=row["last_modified"],
        last_date_used=row["last_date_used"],
        last_rotated=row["last_rotated"],
        version=row["version"],
    )


def prefix_range(prefix: str | None) -> tuple[str, str | None]:
    """``(low, high)``: the strings that start with ``prefix`` are those at or above ``low``
    and below ``high`` in code-point order (``high`` ``None``: no bound above). A range, not a
    ``LIKE``: clientIds may hold ``_``, and an index serves the range."""
    if not prefix:
        return "", None
    # Past a prefix's trailing U+10FFFF nothing is higher; the bound is the rest's successor.
    rest = prefix.rstrip("\U0010ffff")
    if not rest:
        return prefix, None
    successor = ord(rest[-1]) + 1
    if 0xD800 <= successor <= 0xDFFF:  # surrogates are no text either store holds
        successor = 0xE000
    return prefix, rest[:-1] + chr(successor)


def role_columns(role: Role) -> dict[str, Any]:
    return {
        "role_id": role.role_id,
        "scopes": compact(list(role.scopes)),
        "description": role.description,
        "created": role.created,
        "last_modified": role.last_modified,
    }


def role_from_row(row: Row) -> Role:
    return Role(
        role_id=row["role_id"],
        scopes=_scopes(row["scopes"]),
        description=row["description"],
        created=row["created"],
        last_modified=row["last_modified"],
    )


def audit_columns(entry: AuditEntry) -> dict[str, Any]:
    """The columns an entry is inserted with (the store assigns ``sequence``)."""
    return {
        "entity_type": entry.entity_type,
        "entity_id": entry.entity_id,
        "client_id": entry.client_id,
        "action_type": entry.action_type,
        "created": entry.created,
    }


def audit_from_row(row: Row) -> AuditEntry:
    return AuditEntry(
        entity_type=row["entity_type"],
        entity_id=row["entity_id"],
        client_id=row["client_id"],
        action_type=row["action_type"],
        created=row["created"],
        sequence=row["sequence"],
    )


def _scopes(text: str) -> tuple[str, ...]:
    return tuple(orjson.loads(text))
