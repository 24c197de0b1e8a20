"""The artifact part of the :class:`~coordinator.store.base.Store` contract, run against SQLite
and PostgreSQL alike: insert and its conflict, repeats written in place, the upload's
compare-and-set, listings in name order, the sweeper's scan and delete, artifacts going
with their tasks whichever way the tasks are deleted, and the inline artifacts a batch
compare-and-set writes with the records it wins.

Tasks are built as the coordinator builds them (a normalised createTask body, then the
lifecycle's create and claim); artifacts with :func:`coordinator.domain.artifacts.new_artifact`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import asyncpg
import pytest

from coordinator.domain import lifecycle
from coordinator.domain.artifacts import Artifact, InlineArtifact, new_artifact, stored_inline
from coordinator.domain.definitions import normalise
from coordinator.domain.errors import InputError
from coordinator.domain.events import BrokerReply, OutboxEntry, task_events
from coordinator.domain.records import TaskRecord, record_from_definition, to_iso
from coordinator.domain.task_filters import TaskFilter
from coordinator.store.base import Store
from coordinator.store.postgres import PostgresStore
from devharness.tasks import task_definition
from devharness.waiting import wait_until

NOW = 1_700_000_000_000
MINUTE = 60_000
DAY = 24 * 60 * MINUTE
TASK_EXPIRES = NOW + 30 * DAY
TIMING = lifecycle.Timing(claim_timeout_ms=20 * MINUTE)

# Code-point order differs from any linguistic order in case, '-', '_', '/' and digits.
MIXED_NAMES = ["b", "B", "a-1", "a_1", "A", "0z", "-x", "Z", "_y", "ab", "a/b", "a.b", "~"]
UPLOADED = {"uploaded": True, "contentLength": 11, "contentEncoding": "gzip"}


async def running_task(store: Store, task_id: str, *, expires: int = TASK_EXPIRES) -> TaskRecord:
    """Store a task whose run 0 is running (claimed at ``NOW``)."""
    body = task_definition(NOW, expires=to_iso(expires))
    definition = normalise(task_id, body, now=NOW, max_deadline_ms=DAY)
    created = lifecycle.create(record_from_definition(task_id, definition), now=NOW).record
    stored = await store.insert(created)
    assert stored is not None
    claimed = lifecycle.claim(
        stored, run_id=0, worker_group="wg", worker_id="w", now=NOW, timing=TIMING
    ).record
    written = await store.compare_and_set(claimed)
    assert written is not None
    return written


def artifact(task: TaskRecord, name: str, *, expires: int = NOW + DAY, **body: Any) -> Artifact:
    """An s3 artifact of run 0 (``body`` overrides the request's fields)."""
    request = {"storageType": "s3", "contentType": "text/plain", "expires": to_iso(expires)}
    return new_artifact(
        task, task_id=task.task_id, run_id=0, name=name, body={**request, **body}, now=NOW
    )


async def inserted(store: Store, *artifacts: Artifact) -> None:
    for one in artifacts:
        assert await store.insert_artifact(one) is None


# --- single artifacts ------------------------------------------------------------------------


async def test_insert_then_get_reads_back_the_same_artifact(store: Store) -> None:
    task = await running_task(store, "T")
    error = artifact(
        task,
        "public/err",
        storageType="error",
        contentType=None,
        reason="file-missing-on-worker",
        message='héllo ✓ "quoted"\n' + "m" * 4000,
    )
    error = replace(error, content_type="application/binary")
    s3 = artifact(task, "public/logs/live.log", contentLength=2**40)

    await inserted(store, error, s3)

    assert await store.get_artifact("T", 0, "public/err") == error
    assert await store.get_artifact("T", 0, "public/logs/live.log") == s3
    assert await store.get_artifact("T", 0, "public/logs") is None
    assert await store.get_artifact("T", 1, "public/err") is None
    assert await store.get_artifact("other", 0, "public/err") is None


async def test_insert_of_an_existing_name_returns_the_stored_artifact_unchanged(
    store: Store,
) -> None:
    task = await running_task(store, "T")
    first = artifact(task, "a")
    await inserted(store, first)

    other = artifact(task, "a", contentType="application/json", expires=NOW + 2 * DAY)
    assert await store.insert_artifact(other) == first
    assert await store.get_artifact("T", 0, "a") == first


async def test_the_same_name_in_another_run_or_task_is_another_artifact(store: Store) -> None:
    task, other = await running_task(store, "T"), await running_task(store, "U")
    run_1 = replace(artifact(task, "a"), run_id=1)
    await inserted(store, artifact(task, "a"), run_1, artifact(other, "a"))
    assert await store.get_artifact("T", 1, "a") == run_1


async def test_insert_for_a_task_that_does_not_exist_is_task_not_found(store: Store) -> None:
    task = await running_task(store, "T")
    orphan = replace(artifact(task, "a"), task_id="gone")
    with pytest.raises(InputError, match=r"^Task not found$"):
        await store.insert_artifact(orphan)
    assert await store.get_artifact("gone", 0, "a") is None


async def test_concurrent_inserts_of_one_name_store_exactly_one(store: Store) -> None:
    task = await running_task(store, "T")
    candidates = [artifact(task, "a", contentType=f"text/x-{i}") for i in range(8)]

    results = await asyncio.gather(*(store.insert_artifact(one) for one in candidates))

    winners = [one for one, result in zip(candidates, results, strict=True) if result is None]
    assert len(winners) == 1
    assert all(result in (None, winners[0]) for result in results)
    assert await store.get_artifact("T", 0, "a") == winners[0]


async def test_replace_writes_type_details_and_expires_and_keeps_the_rest(store: Store) -> None:
    task = await running_task(store, "T")
    reference = artifact(
        task, "r", storageType="reference", url="https://x.example/1", contentLength=None
    )
    await inserted(store, reference)

    link = replace(
        reference,
        storage_type="link",
        details={"artifact": "b"},
        expires=NOW + 2 * DAY,
        content_type="ignored/by-replace",
        created=NOW + 5,
    )
    await store.replace_artifact(link)

    assert await store.get_artifact("T", 0, "r") == replace(
        reference, storage_type="link", details={"artifact": "b"}, expires=NOW + 2 * DAY
    )


async def test_replace_of_an_s3_artifact_keeps_its_upload_state(store: Store) -> None:
    task = await running_task(store, "T")
    s3 = artifact(task, "a")
    await inserted(store, s3)
    assert await store.mark_uploaded("T", 0, "a", UPLOADED)

    # a repeat read before the upload finished carries the old (empty) details
    await store.replace_artifact(replace(s3, expires=NOW + 2 * DAY))

    assert await store.get_artifact("T", 0, "a") == replace(
        s3, details=UPLOADED, expires=NOW + 2 * DAY
    )


async def test_replace_of_a_missing_artifact_writes_nothing(store: Store) -> None:
    task = await running_task(store, "T")
    await store.replace_artifact(artifact(task, "a"))
    assert await store.get_artifact("T", 0, "a") is None


async def test_mark_uploaded_sets_the_details_of_an_s3_artifact_only(store: Store) -> None:
    task = await running_task(store, "T")
    link = artifact(task, "l", storageType="link", artifact="a", contentType=None)
    link = replace(link, content_type="application/binary")
    await inserted(store, artifact(task, "a"), link)

    assert await store.mark_uploaded("T", 0, "a", UPLOADED)
    stored = await store.get_artifact("T", 0, "a")
    assert stored is not None
    assert stored.details == UPLOADED and stored.uploaded

    again = {**UPLOADED, "contentLength": 3, "contentEncoding": None}
    assert await store.mark_uploaded("T", 0, "a", again)
    assert (await store.get_artifact("T", 0, "a")) == replace(stored, details=again)

    assert not await store.mark_uploaded("T", 0, "l", UPLOADED)
    assert await store.get_artifact("T", 0, "l") == link
    assert not await store.mark_uploaded("T", 0, "missing", UPLOADED)


# --- listings ---------------------------------------------------------------------------------


async def test_list_artifacts_pages_through_one_run_in_code_point_order(store: Store) -> None:
    task, other = await running_task(store, "T"), await running_task(store, "U")
    expired = {"expires": NOW - 10 * MINUTE}  # listed until deleted
    await inserted(
        store,
        *(artifact(task, name, **(expired if name == "b" else {})) for name in MIXED_NAMES),
        replace(artifact(task, "zz"), run_id=1),
        artifact(other, "aa"),
    )

    names: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        page = await store.list_artifacts("T", 0, after=after, limit=4)
        assert len(page.items) <= 4
        names += [one.name for one in page.items]
        pages += 1
        if page.next_after is None:
            break
        assert page.next_after == page.items[-1].name
        after = page.next_after
    assert names == sorted(MIXED_NAMES)
    assert pages == 4  # 13 names: 4 + 4 + 4 + 1

    exact = await store.list_artifacts("T", 0, after=None, limit=len(MIXED_NAMES))
    assert exact.next_after is None and len(exact.items) == len(MIXED_NAMES)
    assert (await store.list_artifacts("T", 2, after=None, limit=10)).items == []
    tail = await store.list_artifacts("T", 0, after="b", limit=10)
    assert [one.name for one in tail.items] == [n for n in sorted(MIXED_NAMES) if n > "b"]


# --- expiry and deletion ----------------------------------------------------------------------


async def test_expired_artifacts_lists_those_due_at_or_before_now_earliest_first(
    store: Store,
) -> None:
    task = await running_task(store, "T")
    due = [artifact(task, f"e{i}", expires=NOW + 3 * MINUTE - i * MINUTE) for i in range(3)]
    await inserted(store, *due, artifact(task, "later", expires=NOW + 3 * MINUTE + 1))

    assert await store.expired_artifacts(NOW + 3 * MINUTE, 10) == list(reversed(due))
    assert await store.expired_artifacts(NOW + 3 * MINUTE, 2) == [due[2], due[1]]
    assert await store.expired_artifacts(NOW, 10) == []


async def test_delete_artifacts_deletes_those_keys_and_counts_the_ones_that_existed(
    store: Store,
) -> None:
    task = await running_task(store, "T")
    a, b, c = (artifact(task, name) for name in ("a", "b", "c"))
    await inserted(store, a, b, c)

    assert await store.delete_artifacts([a.key, c.key, ("T", 0, "missing")]) == 2
    assert await store.delete_artifacts([a.key]) == 0
    assert await store.delete_artifacts([]) == 0
    assert (await store.list_artifacts("T", 0, after=None, limit=10)).items == [b]
    # the name is free again
    assert await store.insert_artifact(a) is None


async def test_artifacts_of_tasks_lists_every_artifact_of_those_tasks(store: Store) -> None:
    task, other, third = [await running_task(store, task_id) for task_id in ("T", "U", "V")]
    t_b, t_a = artifact(task, "b"), artifact(task, "a")
    t_run_1 = replace(artifact(task, "0"), run_id=1)
    u_a = artifact(other, "a")
    await inserted(store, t_b, t_run_1, t_a, u_a, artifact(third, "v"))

    assert await store.artifacts_of_tasks(["T", "U", "missing"]) == [t_a, t_b, t_run_1, u_a]
    assert await store.artifacts_of_tasks([]) == []


async def test_expired_tasks_take_their_artifacts_with_them(store: Store) -> None:
    doomed = await running_task(store, "doomed", expires=NOW + DAY)
    kept = await running_task(store, "kept")
    await inserted(store, artifact(doomed, "a"), artifact(doomed, "b"), artifact(kept, "a"))

    assert await store.delete_expired(NOW + DAY, 10) == 1

    assert await store.artifacts_of_tasks(["doomed", "kept"]) == [artifact(kept, "a")]
    assert await store.expired_artifacts(NOW + DAY, 10) == [artifact(kept, "a")]


async def test_deleted_tasks_take_their_artifacts_with_them(store: Store) -> None:
    doomed = await running_task(store, "doomed")
    kept = await running_task(store, "kept")
    await inserted(store, artifact(doomed, "a"), artifact(kept, "a"))
    assert await store.mark_uploaded("doomed", 0, "a", UPLOADED)

    matching = TaskFilter(task_group_id="doomed")  # a task's group is itself by default
    assert await store.delete_matching(matching, now=NOW, limit=10) == 1

    assert await store.get_artifact("doomed", 0, "a") is None
    assert await store.artifacts_of_tasks(["doomed", "kept"]) == [artifact(kept, "a")]
    # a new task of the same id does not inherit them
    await running_task(store, "doomed")
    assert (await store.list_artifacts("doomed", 0, after=None, limit=10)).items == []


# --- PostgreSQL: a task deleted under an insert ------------------------------------------------


async def test_an_insert_racing_its_tasks_deletion_is_task_not_found(
    postgres_schema_url: str,
) -> None:
    store = PostgresStore(postgres_schema_url)
    await store.open()
    deleter = await asyncpg.connect(postgres_schema_url)
    try:
        task = await running_task(store, "T")
        async with deleter.transaction():
            await deleter.execute("DELETE FROM tasks WHERE task_id = 'T'")
            # The insert still sees the task (the delete is not committed), so its foreign
            # key check waits on the deleter's row lock, then finds the row gone.
            insert = asyncio.create_task(store.insert_artifact(artifact(task, "a")))

            async def insert_waits_on_the_lock() -> bool:
                # pg_stat_activity is read once a transaction unless its snapshot is cleared:
                # a first look before the insert waited would be seen again and again
                await deleter.execute("SELECT pg_stat_clear_snapshot()")
                waiting = await deleter.fetchval(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO artifacts%'"
                )
                return bool(waiting)

            await wait_until(insert_waits_on_the_lock, within=10)
        with pytest.raises(InputError, match=r"^Task not found$"):
            await insert
        assert await store.get_artifact("T", 0, "a") is None
    finally:
        await deleter.close()
        await store.close()


@pytest.mark.parametrize("published", [False, True], ids=["events-off", "events-on"])
async def test_a_batch_write_stores_the_inline_artifacts_of_the_records_it_wins(
    store: Store, published: bool
) -> None:
    won, lost = await running_task(store, "A"), await running_task(store, "B")
    done = [
        lifecycle.report(t, run_id=0, state="completed", reason="completed", now=NOW, timing=TIMING)
        for t in (won, lost)
    ]
    stale = replace(done[1].record, version=done[1].record.version + 3)
    logged = InlineArtifact(
        name="public/log", content_type="text/plain", content_encoding="gzip", content=b"\x1f\x8b"
    )
    events = {"A": task_events(won, done[0].record), "B": task_events(lost, stale)}
    resolving = {"A", "B"}
    stored = await store.compare_and_set_many(
        [done[0].record, stale],
        artifacts={
            "A": [stored_inline(done[0].record, 0, logged, now=NOW)],
            "B": [stored_inline(stale, 0, logged, now=NOW)],
        },
        events=events if published else None,
        resolving=resolving if published else (),
    )
    assert [s is not None for s in stored] == [True, False]
    handed: list[str] = []  # exchanges

    async def confirm(entries: Sequence[OutboxEntry]) -> BrokerReply:
        handed.extend(entry.exchange for entry in entries)
        return BrokerReply(confirmed=frozenset(entry.id for entry in entries))

    await store.publish_outbox(100, confirm, now=NOW)
    # the winner's message only, then its task group's (each task is a group of its own)
    assert handed == (["task-completed", "task-group-resolved"] if published else [])
    got = await store.get_artifact("A", 0, "public/log")
    assert got is not None and got.inline and got.expires == TASK_EXPIRES
    assert got.to_api()["contentLength"] == 2
    assert await store.artifact_content("A", 0, "public/log") == b"\x1f\x8b"
    assert await store.get_artifact("B", 0, "public/log") is None
    # an upload over it moves its bytes to the blob store: the row's go
    assert await store.mark_uploaded("A", 0, "public/log", UPLOADED)
    assert await store.artifact_content("A", 0, "public/log") is None
    assert await store.artifact_content("A", 0, "no such") is None


async def test_an_inline_artifact_never_replaces_a_name_the_run_has(store: Store) -> None:
    task = await running_task(store, "A")
    assert await store.insert_artifact(artifact(task, "public/log")) is None
    done = lifecycle.report(
        task, run_id=0, state="failed", reason="failed", now=NOW, timing=TIMING
    ).record
    logged = InlineArtifact(
        name="public/log", content_type="text/x-other", content_encoding=None, content=b"x"
    )
    [stored] = await store.compare_and_set_many(
        [done], artifacts={"A": [stored_inline(done, 0, logged, now=NOW)]}
    )
    assert stored is not None
    got = await store.get_artifact("A", 0, "public/log")
    assert got is not None and not got.uploaded and got.content_type == "text/plain"
    assert await store.artifact_content("A", 0, "public/log") is None
