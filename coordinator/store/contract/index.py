"""The index part of the store contract (docs/index-service.md): indexed tasks at their paths,
written under the rank rule, the namespaces above them, and their expiry.

Entries a completion indexes are written by the completing compare-and-set itself
(:meth:`~coordinator.store.contract.tasks.TaskStore.compare_and_set`'s ``index``), in its
transaction: a completion is indexed exactly when it is stored, once, whichever replica
stores it.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from coordinator.domain.index import IndexedTask, Namespace


class IndexStore(abc.ABC):
    """Indexed tasks and their namespaces."""

    @abc.abstractmethod
    async def insert_indexed_task(self, entry: IndexedTask, *, now: int) -> IndexedTask:
        """Store ``entry`` at its path if it outranks what is there
        (:func:`~coordinator.domain.index.outranks`, ``now`` deciding what has expired), and
        raise the expiry of the namespaces above it (never lower it), in one transaction;
        the entry at the path afterwards (``entry``, or the one that outranked it)."""

    @abc.abstractmethod
    async def get_indexed_tasks(self, paths: Sequence[tuple[str, str]]) -> list[IndexedTask]:
        """The entries at these ``(namespace, name)`` paths, expired ones included (the
        caller decides), in no particular order; a path without one is absent."""

    @abc.abstractmethod
    async def list_indexed_tasks(
        self, namespace: str, *, now: int, limit: int, after: str | None
    ) -> list[IndexedTask]:
        """Up to ``limit`` unexpired entries directly in ``namespace``, by name (code-point
        order), those after ``after`` (``None``: from the first)."""

    @abc.abstractmethod
    async def list_namespaces(
        self, parent: str, *, now: int, limit: int, after: str | None
    ) -> list[Namespace]:
        """Up to ``limit`` unexpired namespaces directly under ``parent``, by name, those
        after ``after``."""

    @abc.abstractmethod
    async def delete_indexed_task(self, namespace: str, name: str) -> bool:
        """Delete the entry at the path (its namespaces stay); whether there was one."""

    @abc.abstractmethod
    async def expire_index(self, now: int, limit: int) -> int:
        """Delete up to ``limit`` entries and up to ``limit`` namespaces that expired before
        ``now``; how many rows in all."""
