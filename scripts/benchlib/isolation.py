"""Row 7, the cost of process isolation: the end-to-end SQLite row (:mod:`benchlib.e2e`) once
with ``queue-worker --isolation none`` (the default: the no-op handler runs in the worker) and
once with ``--isolation process`` (the handlers in each worker's pool of ``capacity`` child
processes, forked from its fork server), at the same capacity, producer concurrency and depth,
each with a fresh Azurite and coordinator; the process row starts producing once every pool
has started (:mod:`benchlib.e2e`: its start-up is not what the rate measures). The workers'
CPU includes their fork servers and pool processes.
The notes give each row's milliseconds per task (wall clock at its rate, and the workers' CPU)
and process ÷ none of both.
"""

from __future__ import annotations

from benchlib import e2e
from benchlib.common import TIMES, Row, Settings
from devharness.azurite import AzuriteProcess
from worker_sdk.options import ISOLATIONS


async def run(settings: Settings) -> list[Row]:
    rows: list[Row] = []
    for isolation in ISOLATIONS:
        row = Row(
            key=f"isolation-{isolation}",
            title=f"queue-worker --isolation {isolation}: end to end, SQLite, no-op handler",
            unit="tasks/s",
        )
        async with AzuriteProcess() as azurite:
            rows.append(
                await e2e.measure(
                    settings, azurite, "sqlite", row, batching=True, isolation=isolation
                )
            )
    costs = [_per_task_ms(row) for row in rows]
    for row, cost in zip(rows, costs, strict=True):
        if cost is not None:
            wall, workers = cost
            row.notes.append(f"per task: {wall:.2f} ms wall clock, workers' CPU {workers:.2f} ms")
    inline, isolated = costs
    if inline is not None and isolated is not None:
        rows[-1].notes.append(
            f"per task, process / none: wall clock {isolated[0] / inline[0]:.1f}{TIMES}, "
            f"workers' CPU {isolated[1] / inline[1]:.1f}{TIMES}"
        )
    return rows


def _per_task_ms(row: Row) -> tuple[float, float] | None:
    """(wall-clock ms per task at the row's rate, the workers' CPU ms per task), or ``None``
    when the row finished nothing."""
    if not row.rate or not row.cpu_ms.get("workers"):
        return None
    return 1000 / row.rate, row.cpu_ms["workers"]
