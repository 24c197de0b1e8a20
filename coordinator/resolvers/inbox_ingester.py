"""Inbox ingester: turns the task inbox's committed rows into tasks, woken by each commit
(PostgreSQL's ``NOTIFY``) and sweeping every second besides (docs/tasks.md#transactional-enqueue).
"""

from __future__ import annotations

from coordinator.service.inbox import InboxService

SWEEP = 1.0
"""Seconds an idle pass waits for a commit before sweeping anyway."""


async def run_once(inbox: InboxService) -> int:
    """Wait for committed rows (at most :data:`SWEEP`), then ingest a batch; how many rows."""
    await inbox.wait_for_rows(SWEEP)
    return await inbox.ingest()
