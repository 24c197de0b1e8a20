"""Client sweeper: deletes the API-managed clients past their ``expires`` that asked for it
(``deleteOnExpiration``), each with an ``expired`` audit entry and a client-deleted message.
An expired client that did not ask stays, refused (401) until it is updated."""

from __future__ import annotations

from coordinator.service.auth import AuthService

INTERVAL = 60.0
"""Seconds between sweeps."""


async def run_once(auth: AuthService) -> int:
    """Delete a batch of expired clients; how many."""
    return await auth.expire_clients()
