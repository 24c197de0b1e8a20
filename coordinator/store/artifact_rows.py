"""Mapping between :class:`~coordinator.domain.artifacts.Artifact` and the ``artifacts`` table's
columns, the same for every driver (``details`` is compact JSON text)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from coordinator.domain.artifacts import Artifact, InlineRow
from coordinator.domain.json_text import compact
from coordinator.domain.records import TaskRecord
from coordinator.store.rows import Row


def key_columns(task_id: str, run_id: int, name: str) -> dict[str, Any]:
    """The primary key's columns, by parameter name (``artifact_name`` for ``name``, which
    the drivers' ``_fetch`` takes for the statement's name)."""
    return {"task_id": task_id, "run_id": run_id, "artifact_name": name}


def artifact_columns(artifact: Artifact) -> dict[str, Any]:
    """Every column, by name."""
    return {
        **key_columns(*artifact.key),
        "storage_type": artifact.storage_type,
        "content_type": artifact.content_type,
        "content_length": artifact.content_length,
        "expires": artifact.expires,
        "details": details_json(artifact.details),
        "created": artifact.created,
    }


def inline_columns(
    written: Sequence[TaskRecord], artifacts: Mapping[str, Sequence[InlineRow]]
) -> list[dict[str, Any]]:
    """The columns of the inline artifacts of these written records, for
    ``insert_inline_artifact``."""
    return [
        {**artifact_columns(artifact), "content": content}
        for record in written
        for artifact, content in artifacts.get(record.task_id, ())
    ]


def details_json(details: Mapping[str, Any]) -> str:
    """``details`` as the column holds it."""
    return compact(dict(details))


def artifact_from_row(row: Row) -> Artifact:
    """An artifact from a row of every column."""
    return Artifact(
        task_id=row["task_id"],
        run_id=row["run_id"],
        name=row["name"],
        storage_type=row["storage_type"],
        content_type=row["content_type"],
        content_length=row["content_length"],
        expires=row["expires"],
        details=orjson.loads(row["details"]),
        created=row["created"],
    )
