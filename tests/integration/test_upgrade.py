"""Upgrades lose nothing: the store every past release wrote (:mod:`tests.fixtures.releases`:
a SQLite file and a PostgreSQL dump each) opens under the current code, which applies the
migrations added since, reads back everything that release read back, and uses the tables
added since (artifacts) with the old tasks.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import asyncpg
import pytest

from coordinator.domain import lifecycle
from coordinator.domain.artifacts import new_artifact
from coordinator.domain.events import BrokerReply, OutboxEntry, task_events
from coordinator.domain.records import to_iso
from coordinator.domain.task_filters import TaskFilter
from coordinator.store.factory import store_from_url
from coordinator.store.sqlfiles import migrations
from tests.fixtures.releases import (
    EXPIRES,
    GROUP,
    MINUTE,
    NOW,
    PENDING,
    RUNNING,
    TASK_IDS,
    ReleaseStore,
    read_back,
    release_stores,
)
from tests.fixtures.stores import driver_url, throwaway_schema


@pytest.fixture(params=release_stores(), ids=lambda release: release.name)
def release(request: pytest.FixtureRequest) -> ReleaseStore:
    """The files of one past release's store."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
async def release_schema_url(postgres_dsn: str, release: ReleaseStore) -> AsyncIterator[str]:
    """URL of a new schema in the session database holding the release's store."""
    async with throwaway_schema(postgres_dsn, "upgrade", release.postgres_dump) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def release_url(request: pytest.FixtureRequest, tmp_path: Path, release: ReleaseStore) -> str:
    """URL of a copy of the release's store, of each driver."""
    return driver_url(
        request, lambda: f"sqlite://{release.copy_sqlite(tmp_path)}", "release_schema_url"
    )


async def schema_versions(url: str) -> list[int]:
    """The migrations the store at ``url`` records as applied, read without the store."""
    if url.startswith("sqlite://"):
        with sqlite3.connect(url.removeprefix("sqlite://")) as conn:
            rows = conn.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()
        return [row[0] for row in rows]
    conn = await asyncpg.connect(url)
    try:
        return [
            row[0] for row in await conn.fetch("SELECT version FROM schema_migrations ORDER BY 1")
        ]
    finally:
        await conn.close()


async def test_a_past_releases_store_opens_migrated_with_its_data_intact(
    release: ReleaseStore, release_url: str
) -> None:
    driver = "sqlite" if release_url.startswith("sqlite://") else "postgres"
    expected = release.expected()
    assert await schema_versions(release_url) == expected["schema_versions"][driver]

    store = store_from_url(release_url)
    await store.open()
    try:
        assert await schema_versions(release_url) == [
            migration.version for migration in migrations(driver)
        ]
        # what the release had; parts added since are empty in its store
        read = await read_back(store)
        assert {part: read[part] for part in expected["read_back"]} == expected["read_back"]

        running = await store.get(RUNNING)
        assert running is not None and running.state == "running"

        # The management API finds the old tasks by what it filters on apart from tasks
        # (PostgreSQL's task_listing, filled by the migration that made it).
        for matching, found in [
            (TaskFilter(scheduler_id=running.scheduler_id), set(TASK_IDS)),
            (TaskFilter(project_id="proj-a"), {RUNNING}),
            (TaskFilter(created_after=NOW - MINUTE, created_before=NOW + MINUTE), set(TASK_IDS)),
            (TaskFilter(scheduler_id="nobody"), set()),
        ]:
            page = await store.list_tasks(matching, now=NOW, limit=100, after=None)
            assert {record.task_id for record in page.items} == found, matching

        # The old tasks take artifacts, and still take transitions.
        body = {"storageType": "s3", "contentType": "text/plain", "expires": to_iso(EXPIRES)}
        artifact = new_artifact(
            running, task_id=RUNNING, run_id=0, name="public/log", body=body, now=NOW + MINUTE
        )
        assert await store.insert_artifact(artifact) is None
        assert (await store.list_artifacts(RUNNING, 0, after=None, limit=10)).items == [artifact]
        completed = lifecycle.report(
            running,
            run_id=0,
            state="completed",
            reason="completed",
            now=NOW + 2 * MINUTE,
            timing=lifecycle.Timing(),
        )
        events = task_events(running, completed.record)
        assert await store.compare_and_set(completed.record, events=events, resolving=True)

        # The group's unresolved tasks were counted: its last one resolves it, once.
        pending = await store.get(PENDING)
        assert pending is not None
        canceled = lifecycle.cancel(pending, now=NOW + 2 * MINUTE).record
        events = task_events(pending, canceled)
        assert await store.compare_and_set(canceled, events=events, resolving=True)
        published: list[OutboxEntry] = []

        async def publish(entries: Sequence[OutboxEntry]) -> BrokerReply:
            published.extend(entries)
            return BrokerReply(confirmed=frozenset(entry.id for entry in entries))

        while (await store.publish_outbox(100, publish, now=NOW + 2 * MINUTE)).published:
            pass
        resolved = [e.key for e in published if e.exchange == "task-group-resolved"]
        assert resolved == [GROUP] and published[-1].exchange == "task-group-resolved"

        # Expiry deletes the old tasks and the new rows with them.
        assert await store.delete_expired(EXPIRES, 100) == len(TASK_IDS)
        assert await store.artifacts_of_tasks([RUNNING]) == []
    finally:
        await store.close()
