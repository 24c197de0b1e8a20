"""Queue-controls refresher: reloads the paused and limited task queues into this process's
copy, which the claim gate consults before anything else, so every replica applies a pause,
a resume or a limit set through another one within about a second."""

from __future__ import annotations

from coordinator.service.queue_controls import QueueControlService


async def run_once(controls: QueueControlService) -> int:
    """Reload; returns how many task queues' controls changed since the last pass."""
    return await controls.refresh()
