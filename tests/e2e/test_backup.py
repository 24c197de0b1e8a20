"""``queue-coordinator backup`` and ``restore`` (docs/operations.md, "Backups and restore"), run
as processes: a backup taken while a ``queue-coordinator serve`` process creates and completes
tasks holds every task acknowledged before it began, and an artifact's bytes, once restored
into a fresh store and served by a new coordinator; and the refusals, each one line and a
non-zero exit. Also the plain ``pg_dump``/``pg_restore`` commands the document shows.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import pytest

from coordinator.store.backups import latest_migration
from coordinator.store.factory import open_store
from devharness.postgres import ADMIN_DSN, throwaway_database
from devharness.processes import REPO, child_env
from devharness.waiting import wait_until
from tests.fixtures.commands import Finished, run_to_end
from tests.fixtures.coordinator import (
    CoordinatorProcess,
    RunningCoordinator,
    StartCoordinator,
    base_config,
)
from tests.fixtures.stores import driver_url

MakeProcess = Callable[..., CoordinatorProcess]

PRODUCERS = 3
"""Concurrent create-claim-complete loops against the coordinator being backed up."""
PROGRESS = {"pending": 0, "running": 1, "completed": 2}
"""A produced task's states in the order it goes through them."""
ARTIFACT = "public/backed-up.bin"


async def queue_coordinator(*args: str, env: dict[str, str], cwd: Path) -> Finished:
    """``queue-coordinator ARGS`` as a process, to its end."""
    return await run_to_end(
        [sys.executable, "-m", "coordinator.cli", *args], cwd=cwd, env=env, timeout_s=120
    )


def store_env(store_url: str, data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a command on the store ``store_url`` with its artifacts under
    ``data_dir``."""
    return child_env(COORDINATOR_STORE_URL=store_url, COORDINATOR_DATA_DIR=str(data_dir), **extra)


def one_line_failure(finished: Finished, words: str) -> None:
    """``finished`` failed with one line on stderr that holds ``words``."""
    assert finished.status == 1, finished.output
    assert len(finished.stderr.strip().splitlines()) == 1, finished.stderr
    assert words in finished.stderr, finished.stderr
    assert "Traceback" not in finished.output


@pytest.fixture(params=["sqlite", "postgres"])
def source_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store of the coordinator that is backed up, of each driver."""
    return driver_url(request, lambda: f"sqlite:///{tmp_path / 'source.db'}", "postgres_schema_url")


@pytest.fixture
async def fresh_url(source_url: str, tmp_path: Path) -> AsyncIterator[str]:
    """An empty store of the source's driver to restore into: a SQLite file not yet made, or
    a schema of another name in a database of its own (the backed-up schema's name is taken
    in the session's database)."""
    if source_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'restored' / 'coordinator.db'}"
        return
    async with throwaway_database(ADMIN_DSN, "qc_restore") as dsn:
        yield f"{dsn}?search_path=restored_{secrets.token_hex(4)}"


class Producer:
    """Creates, claims and completes tasks in :data:`PRODUCERS` loops until stopped,
    recording the last state of each task that the coordinator acknowledged."""

    def __init__(self, c: RunningCoordinator) -> None:
        self.c = c
        self.acknowledged: dict[str, str] = {}
        self.stopping = asyncio.Event()

    async def run(self, worker: int) -> None:
        while not self.stopping.is_set():
            task_id = await self.c.create()
            self.acknowledged[task_id] = "pending"
            await self.c.claim(task_id, worker_id=f"producer-{worker}")
            self.acknowledged[task_id] = "running"
            await self.c.report(task_id, 0, "completed")
            self.acknowledged[task_id] = "completed"


async def upload_artifact(c: RunningCoordinator, data: bytes) -> str:
    """A task whose run 0 holds :data:`ARTIFACT` with ``data``; its taskId."""
    task_id = await c.create()
    await c.claim(task_id, worker_id="uploader")
    expires = (await c.ok("GET", f"/task/{task_id}"))["expires"]
    created = await c.ok(
        "POST",
        f"/task/{task_id}/runs/0/artifacts/{ARTIFACT}",
        {"storageType": "s3", "expires": expires, "contentType": "x/y"},
    )
    headers = {"Content-Type": "x/y", "Content-Length": str(len(data))}
    async with c.session.put(created["putUrl"], data=data, headers=headers) as response:
        assert response.status == 200, await response.text()
    return task_id


async def read_artifact(c: RunningCoordinator, task_id: str) -> bytes:
    url = f"{c.api}/task/{task_id}/runs/0/artifacts/{ARTIFACT}"
    async with c.session.get(url) as response:  # follows the 303 to the bytes
        assert response.status == 200, await response.text()
        return await response.read()


@pytest.mark.slow(seconds=20)
async def test_a_backup_under_load_restores_every_task_acknowledged_before_it_began(
    coordinator_process: MakeProcess, source_url: str, fresh_url: str, tmp_path: Path
) -> None:
    source = coordinator_process(store_url=source_url)
    c = await source.start()
    data = secrets.token_bytes(300_000)
    with_artifact = await upload_artifact(c, data)

    producer = Producer(c)
    loops = [asyncio.create_task(producer.run(i)) for i in range(PRODUCERS)]
    try:
        await wait_until(lambda: len(producer.acknowledged) >= 30, what="the load to build up")
        before = dict(producer.acknowledged)
        backup = tmp_path / "backup"
        taken = await queue_coordinator(
            "backup", str(backup), env=store_env(source_url, tmp_path), cwd=tmp_path
        )
        during = set(producer.acknowledged) - set(before)
    finally:
        producer.stopping.set()
        await asyncio.gather(*loops)
    assert taken.status == 0, taken.output
    assert "backed up" in taken.stdout
    assert during, "no task was created while the backup ran: it was not taken under load"

    manifest = json.loads((backup / "manifest.json").read_text())
    assert manifest["store"] == ("sqlite" if source_url.startswith("sqlite") else "postgresql")
    assert manifest["migration"] == latest_migration(manifest["store"])
    assert manifest["artifact_files"] >= 1

    restored_dir = tmp_path / "restored"
    restored = await queue_coordinator(
        "restore", str(backup), env=store_env(fresh_url, restored_dir), cwd=tmp_path
    )
    assert restored.status == 0, restored.output

    target = coordinator_process(
        base_config(
            restored_dir,
            store_url=fresh_url,
            data_dir=restored_dir,
            artifacts_dir=restored_dir / "artifacts",
        )
    )
    r = await target.start()
    for task_id, state in before.items():
        assert await r.ok("GET", f"/task/{task_id}") == await c.ok("GET", f"/task/{task_id}")
        status = await r.status(task_id)
        assert PROGRESS[status["state"]] >= PROGRESS[state], (task_id, state, status)
        if state == "completed":  # nothing changes a completed task: all of it is as it was
            assert status == await c.status(task_id)
    assert await read_artifact(r, with_artifact) == data

    again = await queue_coordinator(
        "restore", str(backup), env=store_env(fresh_url, restored_dir), cwd=tmp_path
    )
    one_line_failure(again, "already holds tasks")


@pytest.fixture
async def sqlite_backup(start_coordinator: StartCoordinator, tmp_path: Path) -> Path:
    """A backup of a SQLite store holding two tasks, taken by the command."""
    c = await start_coordinator(store_url=f"sqlite:///{tmp_path / 'source.db'}")
    await c.create_many(2)
    finished = await queue_coordinator(
        "backup",
        str(tmp_path / "backup"),
        env=store_env(c.config.store_url, tmp_path),
        cwd=tmp_path,
    )
    assert finished.status == 0, finished.output
    return tmp_path / "backup"


async def test_restore_refuses_a_store_holding_tasks_unless_forced(
    sqlite_backup: Path, tmp_path: Path
) -> None:
    target = f"sqlite:///{tmp_path / 'target' / 'coordinator.db'}"
    env = store_env(target, tmp_path / "target")
    first = await queue_coordinator("restore", str(sqlite_backup), env=env, cwd=tmp_path)
    assert first.status == 0, first.output

    one_line_failure(
        await queue_coordinator("restore", str(sqlite_backup), env=env, cwd=tmp_path),
        "already holds tasks; restore into an empty store, or pass --force",
    )
    forced = await queue_coordinator(
        "restore", str(sqlite_backup), "--force", env=env, cwd=tmp_path
    )
    assert forced.status == 0, forced.output


def rewrite_manifest(backup: Path, change: Callable[[dict[str, Any]], Any]) -> None:
    manifest = json.loads((backup / "manifest.json").read_text())
    change(manifest)
    (backup / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("spoil", "words"),
    [
        (lambda backup: None, "no backup at"),
        (lambda backup: (backup / "manifest.json").unlink(), "holds no manifest.json"),
        (lambda backup: (backup / "manifest.json").write_text("{not json"), "cannot read"),
        (
            lambda backup: rewrite_manifest(backup, lambda m: m.pop("migration")),
            "is not a backup manifest: missing or mistyped migration",
        ),
        (
            lambda backup: rewrite_manifest(backup, lambda m: m.update(migration=10_000)),
            "newer than this one knows",
        ),
        (
            lambda backup: rewrite_manifest(backup, lambda m: m.update(format=2)),
            "newer than this coordinator reads",
        ),
        (lambda backup: (backup / "store.sqlite").unlink(), "lacks store.sqlite"),
    ],
    ids=["missing", "no-manifest", "not-json", "no-migration", "newer", "format", "no-copy"],
)
async def test_restore_refuses_what_is_not_a_usable_backup(
    sqlite_backup: Path, tmp_path: Path, spoil: Callable[[Path], Any], words: str
) -> None:
    path = sqlite_backup if words != "no backup at" else tmp_path / "nowhere"
    spoil(path)
    target = tmp_path / "target"
    finished = await queue_coordinator(
        "restore",
        str(path),
        env=store_env(f"sqlite:///{target / 'coordinator.db'}", target),
        cwd=tmp_path,
    )
    one_line_failure(finished, words)
    assert not (target / "coordinator.db").exists()


async def test_backup_refuses_a_directory_that_is_not_empty(
    sqlite_backup: Path, tmp_path: Path
) -> None:
    finished = await queue_coordinator(
        "backup",
        str(sqlite_backup),
        env=store_env(f"sqlite:///{tmp_path / 'source.db'}", tmp_path),
        cwd=tmp_path,
    )
    one_line_failure(finished, "already exists and is not an empty directory")
    assert json.loads((sqlite_backup / "manifest.json").read_text())["store"] == "sqlite"


async def test_a_postgresql_backup_without_pg_dump_is_one_line(
    postgres_schema_url: str, tmp_path: Path
) -> None:
    env = store_env(postgres_schema_url, tmp_path, PATH=str(tmp_path / "no-programs"))
    finished = await queue_coordinator("backup", str(tmp_path / "backup"), env=env, cwd=tmp_path)
    one_line_failure(finished, "pg_dump is not on PATH")
    assert not (tmp_path / "backup").exists()


def documented_pg_dump() -> str:
    """The block of docs/operations.md that backs up and restores with PostgreSQL's own
    programs."""
    text = (REPO / "docs" / "operations.md").read_text()
    blocks = re.findall(r"^```sh\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)
    (block,) = [b for b in blocks if b.startswith("pg_dump ")]
    return str(block)


async def test_the_documented_pg_dump_and_pg_restore_commands_copy_a_store(
    start_coordinator: StartCoordinator, postgres_schema_url: str, tmp_path: Path
) -> None:
    c = await start_coordinator(store_url=postgres_schema_url)
    task_ids = await c.create_many(3)
    parts = urlsplit(postgres_schema_url)
    schema = dict(parse_qsl(parts.query))["search_path"]
    async with throwaway_database(ADMIN_DSN, "qc_documented") as target_dsn:
        env = child_env(
            SOURCE=urlunsplit(parts._replace(query="")), TARGET=target_dsn, SCHEMA=schema
        )
        finished = await run_to_end(
            ["bash", "-e", "-o", "pipefail", "-c", documented_pg_dump()],
            cwd=tmp_path,
            env=env,
            timeout_s=60,
        )
        assert finished.status == 0, finished.output
        restored = await open_store(f"{target_dsn}?search_path={schema}")
        try:
            for task_id in task_ids:
                assert await restored.get(task_id) is not None, task_id
        finally:
            await restored.close()
