"""Upgrades lose nothing: a store the previous release wrote
(:mod:`tests.fixtures.previous_release`: a SQLite file and a PostgreSQL dump) opens under the
current code, which applies the migrations added since, reads back everything that release
read back, and uses the tables added since (artifacts) with the old tasks.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from coordinator.domain import lifecycle
from coordinator.domain.artifacts import new_artifact
from coordinator.domain.records import to_iso
from coordinator.store.factory import store_from_url
from coordinator.store.sqlfiles import migrations
from tests.fixtures.previous_release import (
    EXPECTED,
    EXPIRES,
    MINUTE,
    NOW,
    RUNNING,
    TASK_IDS,
    copy_sqlite,
    postgres_dump,
    read_back,
)
from tests.fixtures.stores import driver_url, throwaway_schema

PREVIOUS_VERSIONS = {"sqlite": [1, 2, 3, 4, 5, 6], "postgres": [1, 2, 3, 4, 5]}
"""The schema versions the previous release's stores have."""


@pytest.fixture
async def previous_release_schema_url(postgres_dsn: str) -> AsyncIterator[str]:
    """URL of a new schema in the session database holding the previous release's store."""
    async with throwaway_schema(postgres_dsn, "upgrade", postgres_dump) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def previous_release_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """URL of a copy of the previous release's store, of each driver."""
    return driver_url(
        request, lambda: f"sqlite://{copy_sqlite(tmp_path)}", "previous_release_schema_url"
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


async def test_the_previous_releases_store_opens_migrated_with_its_data_intact(
    previous_release_url: str,
) -> None:
    driver = "sqlite" if previous_release_url.startswith("sqlite://") else "postgres"
    assert await schema_versions(previous_release_url) == PREVIOUS_VERSIONS[driver]

    store = store_from_url(previous_release_url)
    await store.open()
    try:
        assert await schema_versions(previous_release_url) == [
            migration.version for migration in migrations(driver)
        ]
        assert await read_back(store) == json.loads(EXPECTED.read_text("utf-8"))["read_back"]

        # The old tasks take artifacts, and still take transitions.
        running = await store.get(RUNNING)
        assert running is not None and running.state == "running"
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
        assert await store.compare_and_set(completed.record) is not None

        # Expiry deletes the old tasks and the new rows with them.
        assert await store.delete_expired(EXPIRES, 100) == len(TASK_IDS)
        assert await store.artifacts_of_tasks([RUNNING]) == []
    finally:
        await store.close()
