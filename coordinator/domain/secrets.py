"""Secrets as the secrets service keeps them (docs/secrets.md): the record the store holds,
the rules a secret's name follows, and the audit actions.

A secret is a name, a JSON object (its value) and an ``expires``. The store holds the value
only encrypted (:attr:`StoredSecret.encrypted_value`); nothing in this module ever sees it in
clear. Times are epoch milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coordinator.domain.errors import InputError

MAX_NAME_LENGTH = 1024
"""The longest secret name: the same bound as an artifact's name (a URL path's last part and a
scope's suffix); upstream sets none."""

NAME = re.compile(rf"[\x20-\x7e]{{1,{MAX_NAME_LENGTH}}}")
"""What a secret name is: printable ASCII (what a scope can name), ``/`` included."""

SECRETS_CLIENT_ID = "static/taskcluster/secrets"
"""Who the audit history says expired a secret (upstream's clientId of the service)."""

SECRET_ACTIONS = ("created", "updated", "deleted", "expired")
"""The ``actionType`` of a secret's audit entries (Taskcluster's words)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredSecret:
    """A secret as the store holds it: ``encrypted_value`` is what the service's cipher made
    of its value's JSON, bound to its name."""

    name: str
    encrypted_value: bytes
    expires: int


def check_name(name: str) -> None:
    """Refuse a name no scope can name.

    :raises InputError: empty, longer than :data:`MAX_NAME_LENGTH`, or not printable ASCII.
    """
    if NAME.fullmatch(name) is None:
        raise InputError(
            f"secret name {name[:100]!r} is not valid: it must be 1 to {MAX_NAME_LENGTH} "
            "printable ASCII characters (`/` included)"
        )
