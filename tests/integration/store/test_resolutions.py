"""The resolutions part of the store contract
(:class:`~coordinator.store.contract.resolutions.ResolutionStore`), run against SQLite and
PostgreSQL alike: a task queue's tasks resolved since a time, by outcome, many queues in one
call; what resolved earlier, what has not resolved and what was rerun since are not counted.
"""

from __future__ import annotations

from coordinator.domain import lifecycle
from coordinator.domain.listings import ResolvedCounts
from coordinator.domain.task_queues import TaskQueue
from coordinator.store.base import Store
from tests.fixtures.records import MINUTE, NOW, apply, claim, create, get, report

BUILD = TaskQueue("prov", "wt")
LINT = TaskQueue("prov", "lint")


async def resolved(
    store: Store, task_id: str, state: str, *, at: int, worker_type: str = "wt"
) -> None:
    await create(store, task_id, worker_type=worker_type)
    await claim(store, task_id, now=at)
    await report(store, task_id, state, now=at)


async def test_tasks_resolved_since_a_time_are_counted_by_outcome_per_queue(store: Store) -> None:
    since = NOW + 10 * MINUTE
    await resolved(store, "before", "completed", at=since - 1)
    await resolved(store, "at", "completed", at=since)
    await resolved(store, "after", "completed", at=since + MINUTE)
    await resolved(store, "broke", "failed", at=since + MINUTE)
    await create(store, "cancelled")
    await apply(store, lifecycle.cancel(await get(store, "cancelled"), now=since + 2 * MINUTE))
    await resolved(store, "lint", "failed", at=since + MINUTE, worker_type="lint")
    await create(store, "pending")
    await create(store, "running")
    await claim(store, "running", now=since)
    unknown = TaskQueue("prov", "none")

    counts = await store.resolved_counts_of([BUILD, LINT, unknown], since=since)
    assert counts == {
        BUILD: ResolvedCounts(completed=2, failed=1, exception=1),
        LINT: ResolvedCounts(failed=1),
    }
    assert await store.resolved_counts_of([BUILD], since=since + 2 * MINUTE) == {
        BUILD: ResolvedCounts(exception=1)
    }
    assert await store.resolved_counts_of([BUILD], since=since + 3 * MINUTE) == {}
    assert await store.resolved_counts_of([], since=since) == {}


async def test_a_task_rerun_since_it_resolved_counts_again_only_once_it_resolves(
    store: Store,
) -> None:
    await resolved(store, "T", "failed", at=NOW)
    assert await store.resolved_counts_of([BUILD], since=NOW) == {BUILD: ResolvedCounts(failed=1)}
    await apply(store, lifecycle.rerun(await get(store, "T"), now=NOW + 1))
    assert await store.resolved_counts_of([BUILD], since=NOW) == {}
    await claim(store, "T", now=NOW + 2)
    await report(store, "T", "completed", now=NOW + 3)
    assert await store.resolved_counts_of([BUILD], since=NOW) == {
        BUILD: ResolvedCounts(completed=1)
    }
