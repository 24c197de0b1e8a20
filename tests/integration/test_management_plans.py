"""The management API's common filters are served by indexes on both drivers: the plans of the
store's ``list_tasks`` and ``count_tasks`` statements, over 20,000 analysed tasks of
:mod:`devharness.bulk_tasks`, read no table scan of ``tasks`` (PostgreSQL: no ``Seq Scan``, no
walk of ``tasks_pkey`` that filters what it reads; SQLite: ``SEARCH tasks``, never ``SCAN
tasks``). docs/performance.md has the timings at a million tasks."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator

import asyncpg
import pytest

from coordinator.domain.task_filters import TaskFilter
from coordinator.domain.task_queues import TaskQueue
from coordinator.store.factory import sqlite_path
from devharness.bulk_tasks import DAY, PROVISIONER_ID, SCHEDULERS, WORKER_TYPES, Filled, fill
from devharness.query_plans import Plan, Statement, postgres_plan, sqlite_plan

TASKS = 20_000
NOW = 1_800_000_000_000
"""Fixed, so that every run plans over the same rows."""


def _filters(filled: Filled) -> dict[str, TaskFilter]:
    group = filled.task_group_ids[len(filled.task_group_ids) // 2]
    ten_days_ago = filled.now - 10 * DAY
    return {
        "queue + state": TaskFilter(
            task_queue=TaskQueue(PROVISIONER_ID, WORKER_TYPES[7]), states=("pending",)
        ),
        "task group": TaskFilter(task_group_id=group),
        "scheduler": TaskFilter(scheduler_id=SCHEDULERS[3]),
        "created range": TaskFilter(created_after=ten_days_ago, created_before=ten_days_ago + DAY),
    }


@pytest.fixture
async def filled(store_url: str) -> Filled:
    return await fill(store_url, TASKS, seed=7, now=NOW)


async def _plans(store_url: str, filled: Filled) -> AsyncIterator[tuple[str, Plan]]:
    statements: tuple[Statement, ...] = ("list_tasks", "count_tasks")
    cases = [
        (f"{statement} by {name}", statement, matching)
        for name, matching in _filters(filled).items()
        for statement in statements
    ]
    if store_url.startswith("sqlite"):
        conn = sqlite3.connect(sqlite_path(store_url))
        try:
            for label, statement, matching in cases:
                yield label, sqlite_plan(conn, statement, matching, now=filled.now)
        finally:
            conn.close()
        return
    pg = await asyncpg.connect(store_url)
    try:
        for label, statement, matching in cases:
            yield label, await postgres_plan(pg, statement, matching, now=filled.now)
            # what the store's prepared statement runs once PostgreSQL stops replanning it
            yield (
                f"{label} (generic plan)",
                await postgres_plan(pg, statement, matching, now=filled.now, generic=True),
            )
    finally:
        await pg.close()


@pytest.mark.timeout(60)
async def test_common_filters_read_tasks_through_an_index(store_url: str, filled: Filled) -> None:
    full_scans = {
        label: f"{plan.summary()}\n{plan.text}"
        async for label, plan in _plans(store_url, filled)
        if plan.full_scans_of_tasks() or not plan.scans
    }
    assert not full_scans, "\n\n".join(f"{label}: {text}" for label, text in full_scans.items())
