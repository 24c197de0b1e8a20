"""The artifacts part of the store contract: artifact rows (docs/artifacts.md); their bytes are
the blob store's, except an inline artifact's, which its row holds (written with the report
that carried it: :meth:`~coordinator.store.contract.tasks.TaskStore.compare_and_set_many`).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

from coordinator.domain.artifacts import Artifact, ArtifactKey
from coordinator.domain.events import QueueEvent
from coordinator.domain.listings import Page


class ArtifactStore(abc.ABC):
    """Artifact rows of existing tasks."""

    @abc.abstractmethod
    async def insert_artifact(
        self, artifact: Artifact, *, events: Sequence[QueueEvent] = ()
    ) -> Artifact | None:
        """Store a new artifact of an existing task, and ``events`` in the outbox in the same
        transaction if it is new.

        :returns: ``None`` when stored; the stored artifact, unchanged, when the run has one
            of that name already.
        :raises InputError: the task does not exist (any more): ``Task not found``, what
            createArtifact answers for an unknown task.
        """

    @abc.abstractmethod
    async def replace_artifact(
        self, artifact: Artifact, *, events: Sequence[QueueEvent] = ()
    ) -> None:
        """Write a repeated createArtifact over the stored artifact of the same key (and
        ``events`` in the outbox in the same transaction): its
        storage type, ``expires`` and details (except that an s3 artifact keeps its upload
        state); contentType, ``created`` and the declared length stay. Nothing happens if
        there is none."""

    @abc.abstractmethod
    async def mark_uploaded(
        self, task_id: str, run_id: int, name: str, details: Mapping[str, Any]
    ) -> bool:
        """Set the details of an s3 artifact (its upload state); whether it did (``False``:
        no such artifact, or not of type s3)."""

    @abc.abstractmethod
    async def get_artifact(self, task_id: str, run_id: int, name: str) -> Artifact | None:
        """The artifact, expired or not; ``None`` if there is none."""

    @abc.abstractmethod
    async def artifact_content(self, task_id: str, run_id: int, name: str) -> bytes | None:
        """The bytes an inline artifact's row holds; ``None`` if there is no such artifact
        or its bytes are the blob store's."""

    @abc.abstractmethod
    async def list_artifacts(
        self, task_id: str, run_id: int, *, after: str | None, limit: int
    ) -> Page[Artifact, str]:
        """Every artifact of the run, expired or not, in name order (code point), after the
        name ``after``."""

    @abc.abstractmethod
    async def expired_artifacts(self, now: int, limit: int) -> list[Artifact]:
        """Up to ``limit`` artifacts with ``expires <= now``, the earliest first (as tasks
        expire: an artifact never outlives its task, so this reaches a task's artifacts no
        later than
        :meth:`~coordinator.store.contract.tasks.TaskStore.delete_expired` the task)."""

    @abc.abstractmethod
    async def delete_artifacts(self, keys: Sequence[ArtifactKey]) -> int:
        """Delete these artifacts in one transaction; how many existed."""

    @abc.abstractmethod
    async def artifacts_of_tasks(self, task_ids: Sequence[str]) -> list[Artifact]:
        """Every artifact of these tasks, by task, run and name: what deleting the tasks
        deletes, whose bytes the caller deletes first."""
