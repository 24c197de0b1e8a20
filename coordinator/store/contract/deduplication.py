"""The deduplication part of the store contract (docs/protocol.md, ``deduplicationKey``): which
task holds each ``(task queue, deduplicationKey)``, the key claimed by compare-and-set in the
transaction that inserts its task.

A key's row expires with its holder:
:meth:`~coordinator.store.contract.tasks.TaskStore.delete_expired` deletes the rows whose
holder's ``expires`` has passed. Whether a holder still holds (it is
unresolved, or resolved less than its TTL ago) is the service's rule, not the store's: the
store only guarantees that of concurrent claims of one key from one holder, exactly one wins.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence

from coordinator.domain.events import QueueEvent
from coordinator.domain.records import TaskRecord


@dataclasses.dataclass(frozen=True, slots=True)
class KeyedInsert:
    """What :meth:`DeduplicationStore.insert_keyed` did.

    :param claimed: the key was free (or still the expected holder's) for the task: then
        ``stored`` is the task as stored (``version`` 1), or ``None`` when the task was not
        inserted (its id exists or its group refuses it) and nothing was written.
    :param holder: when the key was not claimed, the task that holds it now (possibly the
        task's own id), or ``None`` if no task does (its row expired in between).
    """

    claimed: bool
    stored: TaskRecord | None = None
    holder: str | None = None


class DeduplicationStore(abc.ABC):
    """Deduplication keys, each held by one task."""

    @abc.abstractmethod
    async def insert_keyed(
        self,
        record: TaskRecord,
        key: str,
        *,
        holder: str | None,
        events: Sequence[QueueEvent] = (),
    ) -> KeyedInsert:
        """Claim ``key`` in the record's task queue for the record, and insert the record as
        :meth:`~coordinator.store.contract.tasks.TaskStore.insert` does, in one transaction.

        :param holder: ``None`` to claim a key no task holds; else the task the caller read
            as holding it, which the key moves from (compare-and-set).
        :returns: whether the key could be claimed and, if so, whether the task was
            inserted; when nothing was written, who holds the key.
        """
