"""Mapping between the index's records (:mod:`coordinator.domain.index`) and the
``indexed_tasks`` and ``index_namespaces`` tables' columns, the same for every driver (an
entry's data is compact JSON text, read back exactly as written)."""

from __future__ import annotations

from typing import Any

from coordinator.domain.index import IndexedTask, Namespace, namespaces_above
from coordinator.domain.json_text import compact, exact_loads
from coordinator.store.rows import Row


def indexed_task_columns(entry: IndexedTask, *, now: int) -> dict[str, Any]:
    """upsert_indexed_task's parameters: every column, and ``now`` for the rank rule."""
    return {
        "namespace": entry.namespace,
        "name": entry.name,
        "rank": entry.rank,
        "task_id": entry.task_id,
        "data": compact(dict(entry.data)),
        "expires": entry.expires,
        "now": now,
    }


def namespace_columns(entry: IndexedTask) -> list[dict[str, Any]]:
    """upsert_index_namespace's parameters for each namespace above ``entry``."""
    return [
        {"parent": above.parent, "name": above.name, "expires": above.expires}
        for above in namespaces_above(entry.namespace, entry.expires)
    ]


def indexed_task_from_row(row: Row) -> IndexedTask:
    return IndexedTask(
        namespace=row["namespace"],
        name=row["name"],
        rank=row["rank"],
        task_id=row["task_id"],
        data=exact_loads(row["data"]),
        expires=row["expires"],
    )


def namespace_from_row(row: Row) -> Namespace:
    return Namespace(parent=row["parent"], name=row["name"], expires=row["expires"])
