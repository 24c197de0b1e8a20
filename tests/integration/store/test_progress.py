"""The run-progress part of the store contract
(:class:`~coordinator.store.contract.progress.ProgressStore`), run against SQLite and
PostgreSQL alike: a running run's report kept and replaced, nothing written for a task that
is not running, and the reports deleted with their task by expiry and by deleteTasks.
"""

from __future__ import annotations

from coordinator.domain.progress import RunProgress
from coordinator.domain.task_filters import TaskFilter
from coordinator.store.base import Store
from tests.fixtures.records import HOUR, NOW, claim, create, report


def progress(task_id: str, fraction: float, message: str | None, *, at: int = NOW) -> RunProgress:
    return RunProgress(task_id=task_id, run_id=0, fraction=fraction, message=message, updated=at)


async def test_a_running_runs_progress_is_kept_and_replaced(store: Store) -> None:
    await create(store, "T")
    await claim(store, "T")
    assert await store.run_progress("T") == []

    assert await store.set_run_progress(progress("T", 0.25, "a quarter"))
    assert await store.run_progress("T") == [progress("T", 0.25, "a quarter")]
    assert await store.set_run_progress(progress("T", 1.0, None, at=NOW + 1))
    assert await store.run_progress("T") == [progress("T", 1.0, None, at=NOW + 1)]


async def test_nothing_is_written_unless_the_task_is_running(store: Store) -> None:
    assert not await store.set_run_progress(progress("missing", 0.5, None))
    await create(store, "T")
    assert not await store.set_run_progress(progress("T", 0.5, "pending"))
    await claim(store, "T")
    assert await store.set_run_progress(progress("T", 0.5, "running"))
    await report(store, "T", "completed")
    assert not await store.set_run_progress(progress("T", 0.9, "resolved"))
    # The last report while it ran stays.
    assert await store.run_progress("T") == [progress("T", 0.5, "running")]
    assert await store.run_progress("missing") == []


async def test_progress_goes_with_its_task_by_expiry_and_by_delete_tasks(store: Store) -> None:
    expires = NOW + 2 * HOUR
    for task_id in ("expiring", "deleted"):
        await create(store, task_id, expires=expires)
        await claim(store, task_id)
        assert await store.set_run_progress(progress(task_id, 0.5, None))

    assert await store.delete_expired(expires + 1, 1) == 1
    gone = "expiring" if await store.get("expiring") is None else "deleted"
    assert await store.run_progress(gone) == []
    left = "deleted" if gone == "expiring" else "expiring"
    deleted = await store.delete_matching(
        TaskFilter(task_group_id=(await store.get(left)).task_group_id),  # type: ignore[union-attr]
        now=NOW,
        limit=10,
    )
    assert deleted == 1
    assert await store.run_progress(left) == []
    # A task of the same id again starts with no progress.
    await create(store, left)
    await claim(store, left)
    assert await store.run_progress(left) == []
