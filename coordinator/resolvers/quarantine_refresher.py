"""Quarantine refresher: reloads the quarantined workers into this process's copy, which
claimTask and claimWork consult instead of the store, so every replica sees a quarantine set
through another one within about a second."""

from __future__ import annotations

from coordinator.service.workers import WorkerService


async def run_once(workers: WorkerService) -> int:
    """Reload; returns how many workers were quarantined or released since the last pass."""
    return await workers.refresh_quarantines()
