"""What :class:`~coordinator.store.base.Store` itself adds to its parts, run against SQLite
and PostgreSQL alike: migrations (replicas migrating one PostgreSQL database at once),
reopening a database, the secrets replicas share, and opening stores by URL.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from coordinator.domain import lifecycle
from coordinator.domain.task_filters import TaskFilter
from coordinator.store.base import Store
from coordinator.store.factory import store_from_url
from coordinator.store.postgres import PostgresStore
from coordinator.store.sqlfiles import migrations
from coordinator.store.sqlite import SQLiteStore
from tests.fixtures.records import (
    NOW,
    TIMING,
    claim,
    create,
    new_record,
)

# --- migrations and reopening -------------------------------------------------------------


async def test_migrate_after_open_applies_nothing(store: Store) -> None:
    assert await store.migrate() == []
    assert await store.migrate() == []
    assert await store.insert(new_record("T")) is not None


async def test_reopening_the_database_keeps_the_data(store: Store, store_url: str) -> None:
    await create(store, "dep")
    await create(store, "T", dependencies=("dep",))
    claimed = await claim(store, "dep")
    await store.close()

    reopened = store_from_url(store_url)
    await reopened.open()
    try:
        assert await reopened.migrate() == []
        assert await reopened.get("dep") == claimed
        dependents = await reopened.dependents("dep", limit=10, after=None)
        assert [record.task_id for record in dependents.items] == ["T"]
        reclaimed = lifecycle.reclaim(claimed, run_id=0, now=NOW + 1, timing=TIMING)
        assert await reopened.compare_and_set(reclaimed.record) is not None
    finally:
        await reopened.close()


async def test_replicas_opening_at_once_apply_each_migration_once(
    postgres_schema_url: str,
) -> None:
    replicas = [PostgresStore(postgres_schema_url, min_size=1, max_size=1) for _ in range(6)]

    await asyncio.gather(*(replica.open() for replica in replicas))
    try:
        conn = await asyncpg.connect(postgres_schema_url)
        try:
            versions = [row[0] for row in await conn.fetch("SELECT version FROM schema_migrations")]
        finally:
            await conn.close()
        assert versions == [migration.version for migration in migrations("postgres")]
        assert await replicas[0].insert(new_record("T")) is not None
        assert await replicas[-1].get("T") is not None
    finally:
        await asyncio.gather(*(replica.close() for replica in replicas))


async def test_a_migrated_postgres_store_tunes_its_hot_tables(postgres_schema_url: str) -> None:
    store = PostgresStore(postgres_schema_url, min_size=1, max_size=1)
    await store.open()
    try:
        conn = await asyncpg.connect(postgres_schema_url)
        try:
            rows = await conn.fetch(
                "SELECT c.relname, c.reloptions FROM pg_class AS c"
                " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
                " WHERE n.nspname = current_schema() AND c.relkind = 'r'"
            )
        finally:
            await conn.close()
    finally:
        await store.close()
    options = {
        row["relname"]: dict(option.split("=", 1) for option in row["reloptions"] or ())
        for row in rows
    }
    assert options["tasks"] == {
        "fillfactor": "70",
        "autovacuum_vacuum_scale_factor": "0.02",
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_vacuum_insert_scale_factor": "0.05",
        "autovacuum_analyze_scale_factor": "0.02",
        "autovacuum_vacuum_cost_delay": "2",
        "autovacuum_vacuum_cost_limit": "1000",
    }
    for queue_table in ("queue_event_outbox", "task_inbox"):
        assert options[queue_table]["autovacuum_vacuum_scale_factor"] == "0"
        assert options[queue_table]["autovacuum_analyze_scale_factor"] == "0"
        assert options[queue_table]["autovacuum_vacuum_cost_delay"] == "0"
    for rewritten in ("task_queues", "workers", "concurrency_key_turns", "run_progress"):
        assert options[rewritten]["fillfactor"] == "70"
        assert options[rewritten]["autovacuum_vacuum_cost_delay"] == "0"
    # tables that are only appended to or rarely rewritten keep the server's defaults
    assert options["artifacts"] == {} and options["task_dependencies"] == {}


# --- shared secrets -----------------------------------------------------------------------


async def test_concurrent_first_asks_for_a_shared_secret_all_get_the_winner(
    store: Store,
) -> None:
    # as replicas starting together on a new database: each offers its own new secret
    secrets = await asyncio.gather(
        *(store.shared_secret("race", new=f"secret-{n}") for n in range(10))
    )
    assert len(set(secrets)) == 1 and secrets[0] in {f"secret-{n}" for n in range(10)}
    assert await store.shared_secret("race", new="later") == secrets[0]


# --- opening stores by URL ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "file"),
    [
        ("sqlite:///{tmp}/abs.db", "abs.db"),
        ("sqlite:////{tmp}/four-slashes.db", "four-slashes.db"),
        ("sqlite:///./relative/rel.db", "relative/rel.db"),
    ],
)
async def test_store_from_url_opens_sqlite_files(
    url: str, file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = store_from_url(url.format(tmp=str(tmp_path).lstrip("/")))
    await store.open()
    try:
        assert await store.insert(new_record("T")) is not None
    finally:
        await store.close()

    same_file = SQLiteStore(tmp_path / file)
    await same_file.open()
    try:
        assert await same_file.get("T") is not None
    finally:
        await same_file.close()


@pytest.mark.parametrize(
    "url",
    [
        "mysql://localhost/db",
        "sqlite://host/x.db",
        "sqlite:///x.db?mode=ro",
        "sqlite://",
        "sqlite:///",
        "/tmp/x.db",
        "",
    ],
)
def test_store_from_url_rejects_other_urls(url: str) -> None:
    with pytest.raises(ValueError, match="store URL"):
        store_from_url(url)


async def test_postgres_lists_tasks_whichever_statement_wrote_them(
    postgres_schema_url: str,
) -> None:
    """task_listing is kept by triggers of tasks, not by the store's statements: a task that
    code without it inserts (the previous release's, during a rolling upgrade) is listed by
    schedulerId, projectId and created too, and deleting tasks unlists them."""
    store = PostgresStore(postgres_schema_url, min_size=1, max_size=1)
    await store.open()
    try:
        await store.insert_many([new_record("A"), new_record("B")])
        conn = await asyncpg.connect(postgres_schema_url)
        try:
            # a copy of A's row, inserted as a statement that knows nothing of task_listing
            await conn.execute(
                'INSERT INTO tasks SELECT (jsonb_populate_record(t, \'{"task_id": "C"}\')).*'
                " FROM tasks AS t WHERE task_id = 'A'"
            )
            record = await store.get("A")
            assert record is not None
            for matching in (
                TaskFilter(scheduler_id=record.scheduler_id),
                TaskFilter(project_id=record.project_id),
                TaskFilter(created_after=record.created, created_before=record.created + 1),
            ):
                page = await store.list_tasks(matching, now=NOW, limit=10, after=None)
                assert [r.task_id for r in page.items] == ["A", "B", "C"], matching
            assert await store.delete_expired(record.expires, 10) == 3
            assert await conn.fetchval("SELECT count(*) FROM task_listing") == 0
        finally:
            await conn.close()
    finally:
        await store.close()
