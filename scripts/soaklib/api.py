"""The soak's own coordinator client: createTask (Hawk-signed when auth is on), retried
idempotently through restarts, and the status reads the checks need."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from devharness.api import API, call
from hawk_signing import Credentials

TRANSIENT = (aiohttp.ClientError, TimeoutError, ConnectionError)


class ApiError(Exception):
    """A definitive (non-5xx) refusal."""


class Api:
    def __init__(
        self, session: aiohttp.ClientSession, root_url: str, credentials: Credentials | None
    ) -> None:
        self._session = session
        self.base = root_url + API
        self._credentials = credentials

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One attempt; ``(status, parsed body)``. Network errors propagate."""
        response = await call(
            self._session,
            method,
            self.base + path,
            body,
            credentials=None if method == "GET" else self._credentials,
            request_timeout=aiohttp.ClientTimeout(total=15),
        )
        return response.status, response.body

    async def retrying(
        self, method: str, path: str, body: Any = None, *, until: float
    ) -> tuple[int, Any]:
        """Retry network errors and 5xx (the coordinator restarting) until monotonic
        ``until``; the last answer or error then stands."""
        delay = 0.1
        while True:
            try:
                status, parsed = await self.request(method, path, body)
                if status < 500 or time.monotonic() >= until:
                    return status, parsed
            except TRANSIENT:
                if time.monotonic() >= until:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def create_task(self, task_id: str, definition: dict[str, Any], *, until: float) -> None:
        status, body = await self.retrying("PUT", f"/task/{task_id}", definition, until=until)
        if status != 200:
            raise ApiError(f"createTask {task_id} -> {status}: {str(body)[:300]}")

    async def create_tasks(
        self, items: Sequence[tuple[str, dict[str, Any]]], *, until: float
    ) -> dict[str, str]:
        """createTasks of ``(taskId, definition)`` items; taskId -> error of those refused."""
        body = {"tasks": [{"taskId": task_id, "task": task} for task_id, task in items]}
        status, answer = await self.retrying("PUT", "/tasks", body, until=until)
        if status != 200:
            raise ApiError(f"createTasks -> {status}: {str(answer)[:300]}")
        return {
            task_id: str(result)[:300]
            for (task_id, _), result in zip(items, answer["tasks"], strict=True)
            if "status" not in result
        }

    async def status(self, task_id: str, *, until: float) -> dict[str, Any] | None:
        """The task's status, ``None`` if the coordinator does not know it (404)."""
        status, body = await self.retrying("GET", f"/task/{task_id}/status", until=until)
        if status == 404:
            return None
        if status != 200:
            raise ApiError(f"status {task_id} -> {status}: {str(body)[:300]}")
        result: dict[str, Any] = body["status"]
        return result

    async def unresolved_runs(self, task_queue: str, *, until: float) -> int:
        """Pending, delayed and running runs of ``provisionerId/workerType`` (the management
        API's exact counts)."""
        status, body = await self.retrying("GET", f"/task-queues/{task_queue}/counts", until=until)
        if status != 200:
            raise ApiError(f"taskQueueCounts -> {status}: {str(body)[:300]}")
        return int(body["pending"]) + int(body["delayed"]) + int(body["running"])

    async def task_group(self, task_group_id: str, *, until: float) -> dict[str, dict[str, Any]]:
        """taskId -> status of every task in the group."""
        found: dict[str, dict[str, Any]] = {}
        token: str | None = None
        while True:
            query = "?limit=1000" + (f"&continuationToken={token}" if token else "")
            status, page = await self.retrying(
                "GET", f"/task-group/{task_group_id}/list{query}", until=until
            )
            if status == 404:
                return found
            if status != 200:
                raise ApiError(f"listTaskGroup -> {status}: {str(page)[:300]}")
            entries: Sequence[dict[str, Any]] = page["tasks"]
            for entry in entries:
                found[entry["status"]["taskId"]] = entry["status"]
            token = page.get("continuationToken")
            if not token:
                return found
