"""Hook scheduler: fires the hooks whose schedule has come due, each due time once across
replicas and crashes (:meth:`~coordinator.service.hooks.HookService.fire_due` says how)."""

from __future__ import annotations

from coordinator.service.hooks import HookService

INTERVAL = 0.5
"""Seconds between idle passes: how late after its due time a hook may fire (a schedule may
name every second)."""


async def run_once(hooks: HookService) -> int:
    """Fire what is due; how many hooks were."""
    return await hooks.fire_due()
