"""Auth refresher: reloads this process's clients and roles when the store's auth generation
moved (a client or role changed through any replica), so a reset accessToken, a disabled
client or a changed role is in force on every replica within a second; and writes the
clients' last uses the directory noted."""

from __future__ import annotations

from coordinator.service.client_directory import ClientDirectory

INTERVAL = 0.25
"""Seconds between polls of the auth generation: one indexed read."""


async def run_once(directory: ClientDirectory) -> int:
    """Reload if anything changed, and flush last uses; returns how many clients' last uses
    were written, plus one for a reload."""
    reloaded = await directory.refresh()
    return int(reloaded) + await directory.flush_used()
