"""Creating one run's artifacts: what ``TaskRun.upload_artifact`` and its siblings do.

An uploaded artifact takes two requests: ``createArtifact`` (storageType ``s3``), signed with
the run's current temporary credentials, answers a ``putUrl``; the bytes then go there in a
PUT (:meth:`~worker_sdk.client.CoordinatorClient.upload_to`), streamed from a file in chunks
rather than read into memory. A transient failure of either (no answer, a 5xx, a 429) repeats
both, as scriptworker does: an identical createArtifact is idempotent and answers a fresh
``putUrl``. The pair is tried :data:`UPLOAD_ATTEMPTS` times with jittered backoff, then the
last :class:`~worker_sdk.errors.RequestFailed` is raised to the caller; a refusal (4xx) is
raised at once. ``link``, ``reference`` and ``error`` artifacts are a createArtifact alone,
retried alike.

Requests go through the worker's own client when they are made on the worker's event loop,
and through a client of their own otherwise (a sync handler's thread, a handler's child
process), which needs only the coordinator's root URLs.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from hawk_signing import Credentials
from worker_sdk.client import CoordinatorClient, new_session
from worker_sdk.errors import RequestFailed
from worker_sdk.timing import Backoff

log = logging.getLogger(__name__)

_JITTER = random.Random()
"""The retries' jitter, one generator for the process: seeding one for each run (from
``os.urandom``) cost a worker about 2 % of its CPU a task."""

UPLOAD_ATTEMPTS = 5
"""How many times an artifact's createArtifact (and PUT) is tried before its failure is raised."""

CHUNK = 256 * 1024
"""Bytes read from a file at a time while uploading it."""

DEFAULT_CONTENT_TYPE = "application/octet-stream"
"""The contentType of an upload whose name says nothing :mod:`mimetypes` knows."""

ErrorReason = Literal[
    "file-missing-on-worker",
    "invalid-resource-on-worker",
    "too-large-file-on-worker",
    "file-not-readable-on-worker",
]
"""The reasons an ``error`` artifact may give (Taskcluster's)."""

Data = bytes | bytearray | memoryview | str | os.PathLike[str]
"""What an upload sends: the bytes themselves, or the path of a file (a ``str`` is a path)."""

Expires = datetime | str | None
"""When an artifact expires: an aware datetime, an RFC 3339 string, or ``None`` for the task's
own ``expires``."""


def content_type_of(name: str) -> str:
    """The media type :mod:`mimetypes` guesses from ``name``, else ``application/octet-stream``.

    Only the type: ``report.tar.gz`` is ``application/x-tar``, and is not uploaded with
    ``Content-Encoding: gzip`` unless the caller says so.
    """
    guessed, _ = mimetypes.guess_type(name, strict=False)
    return guessed or DEFAULT_CONTENT_TYPE


def expires_text(expires: datetime | str) -> str:
    """``expires`` as createArtifact takes it: an aware datetime in UTC with milliseconds; a
    string as it is (the coordinator checks it)."""
    if isinstance(expires, str):
        return expires
    if expires.tzinfo is None:
        raise ValueError(f"expires {expires!r} has no time zone")
    return expires.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, kw_only=True)
class _Upload:
    """Bytes to PUT: in memory, or a file read chunk by chunk on each try."""

    length: int
    content: bytes | None = None
    path: Path | None = None

    @classmethod
    async def of(cls, data: Data) -> _Upload:
        """:raises OSError: the file cannot be read (before anything is created)."""
        if isinstance(data, bytes | bytearray | memoryview):
            content = bytes(data)
            return cls(length=len(content), content=content)
        path = Path(data)
        return cls(length=await asyncio.to_thread(_readable_size, path), path=path)

    def body(self) -> bytes | AsyncIterator[bytes]:
        if self.content is not None:
            return self.content
        assert self.path is not None
        return _chunks(self.path, self.length)


def _readable_size(path: Path) -> int:
    with path.open("rb") as file:
        return os.fstat(file.fileno()).st_size


async def _chunks(path: Path, length: int) -> AsyncIterator[bytes]:
    """The first ``length`` bytes of ``path``, :data:`CHUNK` at a time, read off the loop."""
    file = await asyncio.to_thread(path.open, "rb")
    try:
        left = length
        while left > 0:
            chunk = await asyncio.to_thread(file.read, min(CHUNK, left))
            if not chunk:
                raise OSError(f"{path} shrank while it was uploaded")
            left -= len(chunk)
            yield chunk
    finally:
        await asyncio.to_thread(file.close)


class RunArtifacts:
    """Creates the artifacts of one run; see the module docs. Its public methods are the
    run's own (:class:`~worker_sdk.runs.TaskRun` ``upload_artifact``, ``create_link_artifact``,
    ``create_reference_artifact``, ``create_error_artifact``, and their blocking twins).

    :param root_urls: the coordinator (or its replicas, in order of preference).
    :param task_id: the run's task.
    :param run_id: the run.
    :param task_expires: the task's ``expires``, every artifact's default.
    :param credentials: gives the run's current temporary credentials at each request.
    :param client: the worker's client, used for requests made on ``loop``.
    :param loop: the worker's event loop.
    :param backoff: the pause between tries.
    :param attempts: how many times a request is tried.
    """

    def __init__(
        self,
        *,
        root_urls: Sequence[str],
        task_id: str,
        run_id: int,
        task_expires: str | None,
        credentials: Callable[[], Credentials],
        client: CoordinatorClient | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        backoff: Backoff = Backoff(),  # noqa: B008 (frozen, so sharing the default is safe)
        attempts: int = UPLOAD_ATTEMPTS,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {attempts}")
        self.root_urls = tuple(root_urls)
        self.backoff = backoff
        self._task_id = task_id
        self._run_id = run_id
        self._task_expires = task_expires
        self._credentials = credentials
        self._client = client
        self._loop = loop
        self._attempts = attempts

    async def upload(
        self,
        name: str,
        data: Data,
        *,
        content_type: str | None = None,
        content_encoding: str | None = None,
        expires: Expires = None,
    ) -> None:
        """Upload an artifact (storageType ``s3``): createArtifact, then its bytes.

        :param name: e.g. ``public/report.html``; ``public/`` names anyone may download.
        :param data: the bytes, or the path of a file (a ``str`` is a path), which is
            streamed, never read into memory whole.
        :param content_type: default: guessed from ``name`` (:func:`content_type_of`).
        :param content_encoding: e.g. ``gzip`` for gzipped bytes: downloads carry it, so
            HTTP clients decompress them transparently.
        :param expires: an aware datetime or an RFC 3339 string; default: the task's
            ``expires``.
        :raises RequestFailed: refused, or still failing after a few tries.
        :raises OSError: the file cannot be read (nothing was created).
        """
        upload = await _Upload.of(data)
        content_type = content_type or content_type_of(name)
        body = {
            "storageType": "s3",
            "expires": self._expires(expires),
            "contentType": content_type,
            "contentLength": upload.length,
        }

        async def attempt(client: CoordinatorClient) -> None:
            answer = await self._create_artifact(client, name, body)
            await client.upload_to(
                answer["putUrl"],
                upload.body(),
                content_type=content_type,
                content_length=upload.length,
                content_encoding=content_encoding,
            )

        await self._tried(name, attempt)
        log.info(
            "artifact uploaded taskId=%s runId=%s name=%s contentType=%s bytes=%d",
            self._task_id,
            self._run_id,
            name,
            content_type,
            upload.length,
        )

    async def link(
        self, name: str, target: str, *, content_type: str | None = None, expires: Expires = None
    ) -> None:
        """Make ``name`` stand for the artifact ``target`` of this run (which need not exist
        yet): downloads of ``name`` get ``target``'s content.

        :param expires: default: the task's ``expires``.
        :raises RequestFailed: refused, or still failing after a few tries.
        """
        body = {"storageType": "link", "artifact": target}
        if content_type is not None:
            body["contentType"] = content_type
        await self._create(name, body, expires)

    async def reference(
        self, name: str, url: str, content_type: str, *, expires: Expires = None
    ) -> None:
        """Make downloads of ``name`` redirect to ``url``, stored elsewhere.

        :param expires: default: the task's ``expires``.
        :raises RequestFailed: refused, or still failing after a few tries.
        """
        body = {"storageType": "reference", "url": url, "contentType": content_type}
        await self._create(name, body, expires)

    async def error(
        self, name: str, reason: ErrorReason, message: str, *, expires: Expires = None
    ) -> None:
        """Record why ``name`` could not be provided: downloads of it answer 424 with
        ``reason`` and ``message``.

        :param expires: default: the task's ``expires``.
        :raises RequestFailed: refused, or still failing after a few tries.
        """
        body = {"storageType": "error", "reason": reason, "message": message}
        await self._create(name, body, expires)

    async def _create(self, name: str, body: Mapping[str, Any], expires: Expires) -> None:
        """createArtifact of a ``link``, ``reference`` or ``error`` artifact: ``body``
        without its ``expires``."""
        full = {**body, "expires": self._expires(expires)}

        async def attempt(client: CoordinatorClient) -> None:
            await self._create_artifact(client, name, full)

        await self._tried(name, attempt)
        log.info(
            "artifact created taskId=%s runId=%s name=%s storageType=%s",
            self._task_id,
            self._run_id,
            name,
            body["storageType"],
        )

    def _expires(self, expires: Expires) -> str:
        if expires is not None:
            return expires_text(expires)
        if self._task_expires is None:
            raise ValueError("the task has no expires: give the artifact's expires")
        return self._task_expires

    async def _create_artifact(
        self, client: CoordinatorClient, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await client.create_artifact(
            self._task_id, self._run_id, name, body, credentials=self._credentials()
        )

    async def _tried(
        self, name: str, attempt: Callable[[CoordinatorClient], Awaitable[None]]
    ) -> None:
        """``attempt``, tried again after transient failures up to ``attempts`` times."""
        async with self._client_here() as client:
            for failures in range(self._attempts):
                try:
                    await attempt(client)
                    return
                except RequestFailed as error:
                    if not error.transient or failures + 1 == self._attempts:
                        raise
                    delay = self.backoff.delay(failures, _JITTER)
                    log.warning(
                        "artifact upload failed taskId=%s runId=%s name=%s error=%s retryIn=%.2f",
                        self._task_id,
                        self._run_id,
                        name,
                        error,
                        delay,
                    )
                    await asyncio.sleep(delay)

    @asynccontextmanager
    async def _client_here(self) -> AsyncIterator[CoordinatorClient]:
        """The worker's client on the worker's loop; elsewhere one of its own for the call."""
        if self._client is not None and asyncio.get_running_loop() is self._loop:
            yield self._client
            return
        async with new_session() as session:
            yield CoordinatorClient(session=session, root_urls=self.root_urls, credentials=None)
