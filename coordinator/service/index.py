"""IndexService: Taskcluster's index methods over the store's index part (docs/index-service.md).

Completions index themselves (the completing compare-and-set writes their entries,
:mod:`coordinator.service.transitions`); this is the rest: finding entries (an expired entry
is not found, though it stays until the expiry sweep), listing namespaces and their entries,
insertTask and deleteTask, and the sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from coordinator.domain.errors import NotFound
from coordinator.domain.index import (
    IndexedTask,
    Namespace,
    check_index_path,
    entry,
    split_path,
)
from coordinator.domain.listings import Key, Page, keyed_page
from coordinator.service.clock import Clock
from coordinator.store.base import Store

log = logging.getLogger(__name__)


def _name(found: IndexedTask | Namespace) -> Key:
    return (found.name,)


def _path(found: IndexedTask) -> Key:
    return (found.path,)


class IndexService:
    """The index's operations."""

    def __init__(self, *, store: Store, clock: Clock) -> None:
        self._store = store
        self.clock = clock

    async def find(self, path: str) -> IndexedTask:
        """findTask: the unexpired entry at ``path``.

        :raises NotFound: none (or an expired one).
        """
        found = await self._store.get_indexed_tasks([split_path(path)])
        if not found or found[0].expires <= self.clock():
            raise NotFound("Indexed task not found")
        return found[0]

    async def find_many(
        self, paths: Sequence[str], *, after: str | None, limit: int
    ) -> Page[IndexedTask, Key]:
        """findTasksAtIndex: the unexpired entries at ``paths`` (each once, in their order;
        a path without one adds nothing), up to ``limit``, from the path after ``after`` on
        (the path of the previous page's last entry; one that is not among ``paths``, as
        when they changed, starts from the first).

        :raises InputError: a path is not an index path.
        """
        wanted = list(dict.fromkeys(check_index_path(path) for path in paths))
        if after in wanted:
            wanted = wanted[wanted.index(after) + 1 :]
        stored = await self._store.get_indexed_tasks([split_path(path) for path in wanted])
        now = self.clock()
        at = {found.path: found for found in stored if found.expires > now}
        return keyed_page([at[path] for path in wanted if path in at], limit, _path)

    async def namespaces(
        self, parent: str, *, after: str | None, limit: int
    ) -> Page[Namespace, Key]:
        """listNamespaces: the unexpired namespaces directly under ``parent`` (``""``: the
        top level), by name."""
        if parent:
            check_index_path(parent, what="namespace")
        found = await self._store.list_namespaces(
            parent, now=self.clock(), limit=limit + 1, after=after
        )
        return keyed_page(found, limit, _name)

    async def tasks(
        self, namespace: str, *, after: str | None, limit: int
    ) -> Page[IndexedTask, Key]:
        """listTasks: the unexpired entries directly in ``namespace``, by name."""
        if namespace:
            check_index_path(namespace, what="namespace")
        found = await self._store.list_indexed_tasks(
            namespace, now=self.clock(), limit=limit + 1, after=after
        )
        return keyed_page(found, limit, _name)

    async def insert(
        self, path: str, *, task_id: str, rank: object, data: object, expires: int
    ) -> IndexedTask:
        """insertTask: index ``task_id`` at ``path`` under the rank rule; the entry there
        afterwards (this one, or the one that outranks it).

        :raises InputError: the path, rank or data is not what an entry takes.
        """
        new = entry(path, task_id=task_id, rank=rank, data=data, expires=expires)
        stored = await self._store.insert_indexed_task(new, now=self.clock())
        if stored == new:
            log.info("task indexed taskId=%s namespace=%s rank=%d", task_id, path, new.rank)
        return stored

    async def delete(self, path: str) -> None:
        """deleteTask: remove the entry at ``path`` (its namespaces stay), if there is one."""
        namespace, name = split_path(check_index_path(path, what="namespace"))
        if await self._store.delete_indexed_task(namespace, name):
            log.info("index entry deleted namespace=%s", path)

    async def expire(self, limit: int) -> int:
        """Delete up to ``limit`` expired entries and as many expired namespaces; how many."""
        return await self._store.expire_index(self.clock(), limit)
