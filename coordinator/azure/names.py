"""Queue names: one Azure queue per (provisionerId, workerType, priority), named
deterministically so every replica and every signed URL agree on it."""

from __future__ import annotations

import hashlib
import re

from coordinator.domain.task_queues import priority_level

MAX_PREFIX_LENGTH = 28
"""Leaves 35 characters for ``<16 hex>-<16 hex>-<digit>`` within Azure's 63."""

HASH_LENGTH = 16

_PREFIX_RE = re.compile(r"(?:[a-z0-9](?:-?[a-z0-9])*-?)?")


def check_prefix(prefix: str) -> None:
    """Raise :class:`ValueError` unless ``prefix`` can start an Azure queue name."""
    if len(prefix) > MAX_PREFIX_LENGTH or not _PREFIX_RE.fullmatch(prefix):
        raise ValueError(
            f"queue prefix {prefix!r} must be at most {MAX_PREFIX_LENGTH} lowercase "
            "letters, digits and single hyphens, starting with a letter or digit"
        )


def _id_hash(identifier: str) -> str:
    return hashlib.sha256(identifier.encode()).hexdigest()[:HASH_LENGTH]


def queue_name(prefix: str, provisioner_id: str, worker_type: str, priority: str) -> str:
    """The Azure queue of (provisionerId, workerType, priority).

    ``<prefix><hash(provisionerId)>-<hash(workerType)>-<digit>``, with the priority digit 7
    for ``highest`` down to 1 for ``lowest``. Hashing makes the case-sensitive ids legal
    (Azure names are lowercase) and fixes the length; 64 bits each make collisions
    practically impossible.
    """
    return f"{prefix}{_id_hash(provisioner_id)}-{_id_hash(worker_type)}-{priority_level(priority)}"


def queue_name_pattern(prefix: str) -> re.Pattern[str]:
    """Matches exactly the queue names :func:`queue_name` makes with ``prefix``."""
    return re.compile(
        re.escape(prefix) + rf"[0-9a-f]{{{HASH_LENGTH}}}-[0-9a-f]{{{HASH_LENGTH}}}-[1-7]"
    )
