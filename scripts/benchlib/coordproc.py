"""A ``queue-coordinator serve`` process for one row, its store, and a createTask client.

The store is a fresh SQLite file under the row's directory, or a fresh PostgreSQL database
(created on the server of ``Settings.postgres_dsn``, dropped afterwards). With
``Settings.auth`` a clients file is generated (root client, scope ``*``) and every request is
Hawk-signed; otherwise the coordinator runs with ``COORDINATOR_AUTH=false``.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlsplit

import aiohttp
import slugid

from benchlib.common import PYTHON, Settings
from coordinator.domain.records import from_iso
from coordinator.service.clients_file import ensure_root_client
from devharness.api import API, call
from devharness.postgres import throwaway_database
from devharness.processes import ServeProcess
from devharness.tasks import task_definition
from hawk_signing import Credentials

NewTask = tuple[str, dict[str, Any]]
"""A task to create: its taskId and definition."""

StoreKind = Literal["sqlite", "postgres"]

PROVISIONER_ID = "bench-prov"
BENCH_METADATA = {
    "name": "bench no-op",
    "description": "created by scripts/bench",
    "owner": "bench@example.com",
    "source": "https://example.com/bench",
}
"""The metadata of every bench task."""


@dataclass(kw_only=True)
class Coordinator:
    """A running coordinator process."""

    url: str
    process: asyncio.subprocess.Process | None
    queue_prefix: str
    credentials: Credentials | None
    store_url: str
    clients_file: Path

    @property
    def database(self) -> str:
        """The PostgreSQL database name (meaningless for SQLite)."""
        return urlsplit(self.store_url).path.lstrip("/")

    @property
    def api(self) -> str:
        return self.url + API


@asynccontextmanager
async def _store_url(settings: Settings, store: StoreKind, workdir: Path) -> AsyncIterator[str]:
    if store == "sqlite":
        yield f"sqlite:///{workdir / 'coordinator.db'}"
    else:
        async with throwaway_database(settings.postgres_dsn, "qc_bench") as dsn:
            yield dsn


@asynccontextmanager
async def coordinator(
    settings: Settings,
    *,
    store: StoreKind,
    workdir: Path,
    azure_connection_string: str | None,
    profile: Path | None = None,
    seed: Callable[[str], Awaitable[None]] | None = None,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Coordinator]:
    """Start ``queue-coordinator serve`` (under pyinstrument when ``profile`` names the report
    file) and wait until it answers; stop it (SIGTERM, then SIGKILL) on exit.

    :param seed: fills the store (given its URL) before the coordinator starts.
    :param env: further ``COORDINATOR_*`` variables (``{"COORDINATOR_ARTIFACTS": "azure"}``).
    """
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    clients_file = workdir / "clients.json"
    credentials = None
    if settings.auth:
        credentials = ensure_root_client(clients_file)
    prefix = f"b{uuid.uuid4().hex[:8]}-"
    async with _store_url(settings, store, workdir) as store_url:
        if seed is not None:
            await seed(store_url)
        serve = ServeProcess(
            data_dir=workdir,
            store_url=store_url,
            clients_file=clients_file,
            log=workdir / "coordinator.log",
            azure_connection_string=azure_connection_string,
            interpreter_args=() if profile is None else profiled(profile),
            COORDINATOR_AUTH="true" if settings.auth else "false",
            COORDINATOR_QUEUE_PREFIX=prefix,
            COORDINATOR_LOG_LEVEL=settings.coordinator_log_level,
        )
        serve.env.update(env or {})
        try:
            await serve.start()
            yield Coordinator(
                url=serve.url,
                process=serve.process,
                queue_prefix=prefix,
                credentials=credentials,
                store_url=store_url,
                clients_file=clients_file,
            )
        finally:
            # pyinstrument writes its report after the graceful stop; give it time
            await serve.stop(wait=30.0 if profile else 10.0)
            if profile is not None:
                render_profile(profile)


def profiled(session: Path) -> list[str]:
    """Arguments that run a ``-m module`` under pyinstrument, saving its session file."""
    return ["-m", "pyinstrument", "-r", "pyisession", "-o", str(session)]


def render_profile(session: Path) -> None:
    """Render a pyinstrument session as text twice: as pyinstrument shows it (library frames
    folded), and with the Azure SDK, jsonschema and mohawk frames shown."""
    if not session.exists():
        return
    for suffix, extra in (
        (".txt", []),
        (".libs.txt", ["--show-regex", r".*/(azure|jsonschema|mohawk)/.*"]),
    ):
        subprocess.run(
            [
                *(PYTHON, "-m", "pyinstrument", "--load", str(session), "-r", "text"),
                *("--no-color", "--unicode", "-o", str(session.with_suffix(suffix)), *extra),
            ],
            check=False,
            timeout=120,
        )


class TaskClient:
    """createTask, createTasks, claimTask, claimRuns, resolveRuns, createArtifact,
    listTaskGroup and the exact counts, Hawk-signed when there are credentials."""

    def __init__(self, session: aiohttp.ClientSession, coordinator: Coordinator) -> None:
        self._session = session
        self._coordinator = coordinator

    @staticmethod
    def new_tasks(
        count: int,
        *,
        worker_type: str,
        task_group_id: str,
        priority: str,
        payload: dict[str, Any] | None = None,
    ) -> list[NewTask]:
        """``count`` new ``(taskId, definition)`` no-op tasks of one worker type and group,
        created now (they share one definition; its payload ``payload``, else empty)."""
        definition = task_definition(
            provisionerId=PROVISIONER_ID,
            workerType=worker_type,
            taskGroupId=task_group_id,
            priority=priority,
            metadata=BENCH_METADATA,
            payload=payload or {},
        )
        return [(new_task_id(), definition) for _ in range(count)]

    async def _request(self, method: str, path: str, body: Any = None) -> Any:
        response = await call(
            self._session,
            method,
            self._coordinator.api + path,
            body,
            credentials=self._coordinator.credentials,
        )
        if response.status != 200:
            raise RuntimeError(f"{method} {path} -> {response.status}: {str(response.body)[:300]}")
        return response.body

    async def create(self, task_id: str, body: dict[str, Any]) -> None:
        await self._request("PUT", f"/task/{task_id}", body)

    async def send(self, items: Sequence[NewTask], *, batch: bool) -> int:
        """The items through one createTasks (``batch``), or the one item through createTask;
        how many the coordinator created."""
        if batch:
            return await self.create_many(items)
        await self.create(*items[0])
        return 1

    async def create_many(self, items: Sequence[NewTask]) -> int:
        """createTasks (``PUT /tasks``) with ``(taskId, definition)`` items; how many of them
        the coordinator created (the others came back with a per-item error)."""
        body = {"tasks": [{"taskId": task_id, "task": task} for task_id, task in items]}
        answer = await self._request("PUT", "/tasks", body)
        return sum(1 for result in answer["tasks"] if "status" in result)

    async def create_in_batches(self, items: Sequence[NewTask], batch: int) -> int:
        """:meth:`create_many` of ``items``, ``batch`` at a time, one request after another;
        how many the coordinator created."""
        created = 0
        for start in range(0, len(items), batch):
            created += await self.create_many(items[start : start + batch])
        return created

    async def claim_runs(
        self, runs: list[dict[str, Any]], *, worker_group: str, worker_id: str
    ) -> list[dict[str, Any]]:
        """claimRuns; the per-run results."""
        body = {"workerGroup": worker_group, "workerId": worker_id, "runs": runs}
        claims: list[dict[str, Any]] = (await self._request("POST", "/claim-runs", body))["claims"]
        return claims

    async def resolve_runs(self, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """resolveRuns (nothing to send for no reports); the per-run results."""
        if not reports:
            return []
        answer = await self._request("POST", "/resolve-runs", {"reports": reports})
        results: list[dict[str, Any]] = answer["reports"]
        return results

    async def claim_task(self, task_id: str, *, worker_group: str, worker_id: str) -> None:
        """claimTask of the task's run 0."""
        body = {"workerGroup": worker_group, "workerId": worker_id}
        await self._request("POST", f"/task/{task_id}/runs/0/claim", body)

    async def create_artifact(
        self, task_id: str, run_id: int, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """createArtifact; its answer (an s3 artifact's holds the ``putUrl``)."""
        answer: dict[str, Any] = await self._request(
            "POST", f"/task/{task_id}/runs/{run_id}/artifacts/{quote(name, safe='/')}", body
        )
        return answer

    async def counts(self, worker_type: str) -> tuple[int, int]:
        """(pending, running) runs of the worker type, from the store."""
        body = await self._request("GET", f"/task-queues/{PROVISIONER_ID}/{worker_type}/counts")
        return int(body["pending"]), int(body["running"])

    async def resolved_times(self, task_group_id: str) -> dict[str, tuple[str, float | None]]:
        """taskId -> (state, epoch seconds its last run resolved) for the whole task group."""
        found: dict[str, tuple[str, float | None]] = {}
        token: str | None = None
        while True:
            query = "?limit=1000" + (f"&continuationToken={token}" if token else "")
            page = await self._request("GET", f"/task-group/{task_group_id}/list{query}")
            for entry in page["tasks"]:
                status = entry["status"]
                runs: Sequence[dict[str, Any]] = status["runs"]
                resolved = runs[-1].get("resolved") if runs else None
                found[status["taskId"]] = (
                    status["state"],
                    from_iso(resolved) / 1000 if resolved else None,
                )
            token = page.get("continuationToken")
            if not token:
                return found


def new_task_id() -> str:
    task_id: str = slugid.nice()
    return task_id
