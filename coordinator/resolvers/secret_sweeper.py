"""Secret sweeper: deletes the secrets past their ``expires`` (which already read as not
found), each with an ``expired`` audit entry, as upstream's expiry job does."""

from __future__ import annotations

from coordinator.service.secrets import SecretService

INTERVAL = 60.0
"""Seconds between idle sweeps."""


async def run_once(secrets: SecretService) -> int:
    """Delete a batch of expired secrets; how many."""
    return await secrets.expire_secrets()
