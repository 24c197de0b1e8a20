"""The store interface: every record the coordinator keeps, behind one abstract class composed
of the contract's parts by topic (:mod:`coordinator.store.contract`).

Drivers (:mod:`coordinator.store.sqlite`, :mod:`coordinator.store.postgres`) implement every
part and pass the contract's tests, one module per topic (``tests/integration/store/``). A
new service adds its part as a module of :mod:`coordinator.store.contract` and to the bases of
:class:`Store`. What every part keeps to:

* Listings page by key with a ``limit``; no call holds more than one page in memory.
* All times are epoch milliseconds.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator

from coordinator.domain.task_queues import TaskQueue
from coordinator.store.contract.artifacts import ArtifactStore
from coordinator.store.contract.auth import AuthStore
from coordinator.store.contract.controls import QueueControlStore
from coordinator.store.contract.deduplication import DeduplicationStore
from coordinator.store.contract.dispatch import DispatchStore
from coordinator.store.contract.hooks import HookStore
from coordinator.store.contract.inbox import InboxStore
from coordinator.store.contract.index import IndexStore
from coordinator.store.contract.management import ManagementStore
from coordinator.store.contract.outbox import OutboxStore
from coordinator.store.contract.progress import ProgressStore
from coordinator.store.contract.purge_cache import PurgeCacheStore
from coordinator.store.contract.resolutions import ResolutionStore
from coordinator.store.contract.secrets import SecretStore
from coordinator.store.contract.tasks import TaskStore
from coordinator.store.contract.workers import WorkerStore


class Store(
    TaskStore,
    DispatchStore,
    OutboxStore,
    ManagementStore,
    WorkerStore,
    QueueControlStore,
    ArtifactStore,
    HookStore,
    AuthStore,
    IndexStore,
    SecretStore,
    PurgeCacheStore,
    DeduplicationStore,
    InboxStore,
    ProgressStore,
    ResolutionStore,
    abc.ABC,
):
    """The whole store: every part of the contract, and the database it is kept in."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and apply any pending schema migrations."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the store may not be used afterwards."""

    @abc.abstractmethod
    async def migrate(self) -> list[int]:
        """Apply pending migrations; return the versions applied (empty when up to date)."""

    @abc.abstractmethod
    async def shared_secret(self, name: str, *, new: str) -> str:
        """The secret named ``name`` that every replica on this store shares; ``new`` becomes
        it if there is none yet (the first caller's wins)."""


class ProcessLocks:
    """One :class:`asyncio.Lock` per task queue, in this process (a lock a driver shared by
    several processes takes first, so that each process waits on the shared one once)."""

    def __init__(self) -> None:
        self._locks: defaultdict[TaskQueue, asyncio.Lock] = defaultdict(asyncio.Lock)

    @contextlib.asynccontextmanager
    async def hold(self, task_queue: TaskQueue) -> AsyncIterator[None]:
        async with self._locks[task_queue]:
            yield
