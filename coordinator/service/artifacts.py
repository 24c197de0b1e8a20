"""ArtifactService: Taskcluster's artifact methods over the store's artifact rows and the blob
store's bytes (:mod:`coordinator.blobs`), and the deletion of both when their artifacts expire
or their tasks go.

Every rule is Taskcluster's (:mod:`coordinator.domain.artifacts`); this module orders the reads
and writes around them:

* createArtifact reads the task, builds the artifact, inserts it, and on a repeat stores what
  the repeat may change;
* reads that follow ``link`` artifacts ask the caller's permission for every name they visit
  before loading it (Taskcluster's getArtifact scopes);
* an upload streams the bytes into the blob store and only then marks the row uploaded, so a
  row never claims bytes that are not there; an upload whose row vanished meanwhile (its task
  deleted) takes its bytes back;
* bytes go before rows: an artifact's before its expired row, a task's before the task (whose
  rows the store deletes with it). An inline artifact (one a report carried) keeps its
  bytes in its row, which go with it. A crash in between leaves rows without bytes, which answer
  404 on download and are deleted later, never bytes that nothing points at.

Times are epoch milliseconds.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from coordinator.blobs import BlobPlaceRemoved, BlobReader, BlobStore, blob_key, task_prefix
from coordinator.domain.artifacts import (
    Artifact,
    check_listed_run,
    follow,
    latest_run_id,
    new_artifact,
    replacement,
)
from coordinator.domain.errors import InputError, NotFound
from coordinator.domain.events import QueueEvent, artifact_event
from coordinator.domain.listings import Page
from coordinator.domain.records import TaskRecord
from coordinator.service.clock import Clock, wall_clock
from coordinator.service.gather import bounded
from coordinator.store.base import Store

log = logging.getLogger(__name__)

DELETED_WHILE_UPLOADED = "Artifact not found: it was deleted while its bytes were uploaded"

URL_SECRET = "artifact-urls"
"""The name of the shared secret that signs upload and download URLs."""
PUT_URL_LIFETIME_MS = 45 * 60 * 1000
"""How long an s3 artifact's ``putUrl`` works (Taskcluster's)."""
DOWNLOAD_URL_LIFETIME_MS = 30 * 60 * 1000
"""How long a download URL works (Taskcluster's presigned GET)."""
DELETES_AT_ONCE = 16
"""How many blob deletions are in flight at once."""

NamesPermit = Callable[[tuple[str, ...]], Awaitable[None]]
"""The caller's right to read the artifacts named so far (every name a chain of links visited,
the last one about to be loaded); raises when it may not."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Expiry:
    """What one pass over expired artifacts did.

    :param deleted: how many artifacts (bytes and rows) it deleted.
    :param through: tasks that expired at or before this time have no artifact left, so
        deleting them leaves no bytes behind.
    """

    deleted: int
    through: int


class ArtifactService:
    """The artifact methods, and the deletion of artifacts with their tasks.

    :param store: the task store, which holds the artifact rows.
    :param blobs: where s3 artifacts' bytes are.
    :param clock: epoch-milliseconds clock (the tasks' and runs' clock).
    :param publish_events: put artifact-created in the outbox (docs/events.md).
    """

    def __init__(
        self,
        *,
        store: Store,
        blobs: BlobStore,
        clock: Clock = wall_clock,
        publish_events: bool = False,
    ) -> None:
        self.publish_events = publish_events
        self._store = store
        self.blobs = blobs
        self.clock = clock

    async def url_key(self) -> bytes:
        """The key upload and download URLs are signed with, shared by every replica."""
        return bytes.fromhex(await self._store.shared_secret(URL_SECRET, new=secrets.token_hex(32)))

    # --- createArtifact and finishArtifact ------------------------------------------------

    async def create(
        self, task_id: str, run_id: int, name: str, body: Mapping[str, Any]
    ) -> Artifact:
        """createArtifact: the artifact as stored, new or repeated.

        :param body: valid against post-artifact-request.json.
        :raises InputError: Taskcluster's checks (the task, the run, ``expires``...).
        :raises Conflict: the run is resolved, or a repeat differs in what it may not change.
        """
        task = await self._store.get(task_id)
        artifact = new_artifact(
            task, task_id=task_id, run_id=run_id, name=name, body=body, now=self.clock()
        )
        existing = await self._store.insert_artifact(artifact, events=self._events(task, artifact))
        if existing is not None:
            artifact = replacement(existing, artifact)
            # a repeated createArtifact announces it again, as Taskcluster's does
            await self._store.replace_artifact(artifact, events=self._events(task, artifact))
        log.info(
            "artifact created taskId=%s runId=%d name=%r storageType=%s repeat=%s",
            task_id,
            run_id,
            name,
            artifact.storage_type,
            existing is not None,
        )
        return artifact

    def _events(self, task: TaskRecord | None, artifact: Artifact) -> list[QueueEvent]:
        """artifact-created, written with the artifact (none for s3, or publishing off)."""
        if not self.publish_events or task is None:
            return []
        event = artifact_event(task, artifact)
        return [] if event is None else [event]

    async def finish(self, task_id: str, run_id: int, name: str) -> NoReturn:
        """finishArtifact, which only object artifacts take, and there are none here.

        :raises NotFound: no such artifact.
        :raises InputError: it exists (and so is not an object artifact).
        """
        if await self._store.get_artifact(task_id, run_id, name) is None:
            raise NotFound(
                f"Artifact with taskId `{task_id}`, runId {run_id}, name `{name}` not found"
            )
        raise InputError("Only object artifacts can be finished")

    # --- reads ------------------------------------------------------------------------------

    async def latest_run(self, task_id: str) -> int:
        """The run the ``latest`` methods read.

        :raises NotFound: the task does not exist or has no runs.
        """
        return latest_run_id(await self._store.get(task_id))

    async def resolve(
        self, task_id: str, run_id: int, name: str, *, permit: NamesPermit
    ) -> Artifact:
        """The artifact ``name`` stands for: itself, or where its links lead (getArtifact,
        artifact and their ``latest`` forms).

        :param permit: asked before each load with every name visited so far.
        :raises NotFound: a name on the way has no artifact.
        :raises ArtifactExpired: one has expired.
        :raises InputError: the links lead in a cycle.
        """
        names = [name]
        while True:
            await permit(tuple(names))
            artifact = await self._store.get_artifact(task_id, run_id, names[-1])
            target = follow(artifact, names=names, now=self.clock())
            if target is None:
                assert artifact is not None  # follow raises NotFound otherwise
                return artifact
            names.append(target)

    async def info(self, task_id: str, run_id: int, name: str) -> Artifact:
        """artifactInfo: the artifact itself, a link not followed, expired or not.

        :raises NotFound: ``Artifact not found``.
        """
        artifact = await self._store.get_artifact(task_id, run_id, name)
        if artifact is None:
            raise NotFound("Artifact not found")
        return artifact

    async def listing(
        self, task_id: str, run_id: int | None, *, after: str | None, limit: int
    ) -> tuple[int, Page[Artifact, str]]:
        """listArtifacts (``run_id``) or listLatestArtifacts (``None``): the run listed and
        one page of its artifacts in name order, after the name ``after``.

        :raises NotFound: no such task, or no such run.
        """
        task = await self._store.get(task_id)
        if run_id is None:
            run_id = latest_run_id(task)
        else:
            check_listed_run(task, task_id=task_id, run_id=run_id)
        return run_id, await self._store.list_artifacts(task_id, run_id, after=after, limit=limit)

    # --- bytes ------------------------------------------------------------------------------

    async def uploadable(self, task_id: str, run_id: int, name: str) -> Artifact:
        """The s3 artifact whose bytes an upload brings.

        :raises NotFound: there is none (its task was deleted, or it never was).
        """
        artifact = await self._store.get_artifact(task_id, run_id, name)
        if artifact is None or artifact.storage_type != "s3":
            raise NotFound("Artifact not found: it has no s3 artifact to upload the bytes of")
        return artifact

    async def upload(
        self,
        artifact: Artifact,
        chunks: AsyncIterator[bytes],
        *,
        content_type: str,
        content_encoding: str | None,
        length: int,
    ) -> Artifact:
        """Store the bytes of an s3 artifact (replacing any), then mark it uploaded.

        :param content_type: what the bytes were sent as: must be the artifact's contentType.
        :param content_encoding: how they are encoded (``gzip``), given back on download.
        :param length: how many bytes ``chunks`` carries.
        :raises InputError: the content type differs from the artifact's.
        :raises BlobIncomplete: ``chunks`` did not carry ``length`` bytes; nothing stored.
        :raises NotFound: the artifact was deleted while its bytes arrived.
        :raises BlobUnavailable: the blob store failed.
        """
        if content_type != artifact.content_type:
            raise InputError(
                f"Content-Type {content_type!r} is not the artifact's contentType "
                f"{artifact.content_type!r}: upload with the contentType given to createArtifact"
            )
        key = blob_key(artifact.task_id, artifact.run_id, artifact.name)
        try:
            written = await self.blobs.write(
                key,
                chunks,
                content_type=content_type,
                content_encoding=content_encoding,
                length=length,
            )
        except BlobPlaceRemoved:
            raise NotFound(DELETED_WHILE_UPLOADED) from None
        details = {"uploaded": True, "contentLength": written, "contentEncoding": content_encoding}
        if not await self._store.mark_uploaded(
            artifact.task_id, artifact.run_id, artifact.name, details
        ):
            await self.blobs.delete(key)
            raise NotFound(DELETED_WHILE_UPLOADED)
        log.info(
            "artifact uploaded taskId=%s runId=%d name=%r bytes=%d contentEncoding=%s",
            artifact.task_id,
            artifact.run_id,
            artifact.name,
            written,
            content_encoding,
        )
        return await self.uploaded(artifact.task_id, artifact.run_id, artifact.name)

    async def uploaded(self, task_id: str, run_id: int, name: str) -> Artifact:
        """The artifact, whose bytes are stored.

        :raises NotFound: there is no such artifact, or its bytes are not uploaded yet.
        """
        artifact = await self._store.get_artifact(task_id, run_id, name)
        if artifact is None:
            raise NotFound("Artifact not found")
        check_uploaded(artifact)
        return artifact

    async def open(self, artifact: Artifact) -> BlobReader:
        """The bytes of an uploaded artifact, for streaming out.

        :raises NotFound: they are gone (the artifact is being deleted).
        """
        if artifact.inline:
            content = await self._store.artifact_content(*artifact.key)
            if content is None:
                raise NotFound("Artifact not found: its bytes are gone (it is being deleted)")
            return BlobReader.of(content)
        reader = await self.blobs.open(blob_key(artifact.task_id, artifact.run_id, artifact.name))
        if reader is None:
            raise NotFound("Artifact not found: its bytes are gone (it is being deleted)")
        return reader

    def blob_url(self, artifact: Artifact) -> str | None:
        """A URL of the blob store that serves the bytes of an uploaded artifact for
        :data:`DOWNLOAD_URL_LIFETIME_MS` (on the real clock, the blob store's), or ``None`` when
        the coordinator serves them itself (always an inline artifact's)."""
        if artifact.inline:
            return None
        return self.blobs.download_url(
            blob_key(artifact.task_id, artifact.run_id, artifact.name),
            content_type=artifact.content_type,
            content_encoding=artifact.details.get("contentEncoding"),
            expires=wall_clock() + DOWNLOAD_URL_LIFETIME_MS,
        )

    # --- deletion ---------------------------------------------------------------------------

    async def delete_bytes_of(self, task_ids: Sequence[str]) -> int:
        """Delete the bytes of every artifact of these tasks, which are about to be deleted
        (their rows go with them); how many tasks had bytes.

        :raises BlobUnavailable: the blob store failed; delete the tasks later.
        """
        artifacts = await self._store.artifacts_of_tasks(task_ids)
        holders = sorted({a.task_id for a in artifacts if _in_blobs(a)})
        await bounded(
            (self.blobs.delete_prefix(task_prefix(task_id)) for task_id in holders),
            at_once=DELETES_AT_ONCE,
        )
        return len(holders)

    async def expire(self, limit: int) -> Expiry:
        """Delete up to ``limit`` expired artifacts, the earliest first: their bytes, then
        their rows.

        :raises BlobUnavailable: the blob store failed; no row was deleted.
        """
        now = self.clock()
        expired = await self._store.expired_artifacts(now, limit)
        await bounded(
            (
                self.blobs.delete(blob_key(a.task_id, a.run_id, a.name))
                for a in expired
                if _in_blobs(a)
            ),
            at_once=DELETES_AT_ONCE,
        )
        deleted = await self._store.delete_artifacts([a.key for a in expired])
        # A full batch may have left artifacts expiring at the same time as its last one.
        through = now if len(expired) < limit else expired[-1].expires - 1
        return Expiry(deleted=deleted, through=through)


def _in_blobs(artifact: Artifact) -> bool:
    """Whether the blob store may hold bytes of ``artifact``: an s3 artifact's, unless its
    row holds them (an upload not finished may have left some)."""
    return artifact.storage_type == "s3" and not artifact.inline


def check_uploaded(artifact: Artifact) -> None:
    """Refuse to serve an s3 artifact whose bytes are not uploaded yet (Taskcluster would
    redirect to bytes that are not there; we answer 404 until they are).

    :raises NotFound: ``Artifact not uploaded yet``.
    """
    if artifact.storage_type == "s3" and not artifact.uploaded:
        raise NotFound("Artifact not uploaded yet")
