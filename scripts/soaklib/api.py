"""The soak's own coordinator client: createTask (Hawk-signed when auth is on), retried
idempotently through restarts, and the status reads the checks need."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import aiohttp
from yarl import URL

from devharness.api import API, call
from hawk_signing import Credentials, authorization

TRANSIENT = (aiohttp.ClientError, TimeoutError, ConnectionError)


class ApiError(Exception):
    """A definitive (non-5xx) refusal."""


class Api:
    """The coordinator at ``root_urls``: replicas of one deployment, tried in turn as a load
    balancer would when one does not answer or answers 5xx."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        root_urls: Sequence[str],
        credentials: Credentials | None,
    ) -> None:
        self._session = session
        self._roots = list(root_urls)
        self._current = 0
        self._credentials = credentials

    @property
    def root_url(self) -> str:
        """The replica requests go to now."""
        return self._roots[self._current]

    @property
    def base(self) -> str:
        return self.root_url + API

    def _next_replica(self) -> None:
        self._current = (self._current + 1) % len(self._roots)

    async def request(
        self, method: str, path: str, body: Any = None, *, service: str = API
    ) -> tuple[int, Any]:
        """One attempt; ``(status, parsed body)``. Network errors propagate.

        :param service: the API's path (the queue's unless given).
        """
        response = await call(
            self._session,
            method,
            self.root_url + service + path,
            body,
            credentials=None if method == "GET" else self._credentials,
            request_timeout=aiohttp.ClientTimeout(total=15),
        )
        return response.status, response.body

    async def retrying(
        self, method: str, path: str, body: Any = None, *, until: float, service: str = API
    ) -> tuple[int, Any]:
        """Retry network errors and 5xx (a coordinator restarting, the store down) on the
        next replica until monotonic ``until``; the last answer or error then stands."""
        delay = 0.1
        while True:
            try:
                status, parsed = await self.request(method, path, body, service=service)
                if status < 500 or time.monotonic() >= until:
                    return status, parsed
            except TRANSIENT:
                if time.monotonic() >= until:
                    raise
            self._next_replica()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def read(self, url: str, *, until: float) -> bytes:
        """The bytes at ``url`` (an artifact's: the redirect to its signed URL is followed),
        read with the credentials; retried like :meth:`retrying`; ``ApiError`` unless 200."""
        delay = 0.1
        while True:
            try:
                headers = {}
                if self._credentials is not None:
                    headers["Authorization"] = authorization(
                        self._credentials, method="GET", url=url, content="", content_type=""
                    )
                async with self._session.get(
                    URL(url, encoded=True),
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=15),
                ) as response:
                    data = await response.read()
                    if response.status == 200:
                        return data
                    if response.status < 500 or time.monotonic() >= until:
                        raise ApiError(f"GET {url} -> {response.status}: {data[:300]!r}")
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
        entries = await self.task_group_entries(task_group_id, until=until)
        return {task_id: entry["status"] for task_id, entry in entries.items()}

    async def task_group_entries(
        self, task_group_id: str, *, until: float
    ) -> dict[str, dict[str, Any]]:
        """taskId -> ``{status, task}`` of every task in the group."""
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
                found[entry["status"]["taskId"]] = entry
            token = page.get("continuationToken")
            if not token:
                return found
