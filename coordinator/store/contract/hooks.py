"""The hooks part of the store contract (docs/hooks.md): hooks, written with compare-and-set,
and their last fires.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from coordinator.domain.events import QueueEvent
from coordinator.domain.hooks import Hook, LastFire


class HookStore(abc.ABC):
    """Hooks and their last fires."""

    @abc.abstractmethod
    async def insert_hook(self, hook: Hook, *, events: Sequence[QueueEvent] = ()) -> bool:
        """Store a new hook (``version`` 1), and ``events`` in the outbox in the same
        transaction; ``False`` (nothing written) if one of that id exists."""

    @abc.abstractmethod
    async def get_hook(self, hook_group_id: str, hook_id: str) -> Hook | None:
        """The hook, or ``None``."""

    @abc.abstractmethod
    async def hooks_in_group(self, hook_group_id: str) -> list[Hook]:
        """Every hook of the group, by hookId."""

    @abc.abstractmethod
    async def hook_groups(self) -> list[str]:
        """Every hookGroupId with at least one hook, in order."""

    @abc.abstractmethod
    async def compare_and_set_hook(
        self, hook: Hook, *, events: Sequence[QueueEvent] = ()
    ) -> Hook | None:
        """Write ``hook`` if the stored version is still ``hook.version``, and ``events`` in
        the outbox in the same transaction; the stored hook (its version one more), or
        ``None`` (nothing written) when it changed meanwhile or is gone."""

    @abc.abstractmethod
    async def delete_hook(
        self, hook_group_id: str, hook_id: str, *, events: Sequence[QueueEvent] = ()
    ) -> bool:
        """Delete the hook and its last fires, and ``events`` in the outbox in the hook's
        delete's transaction; whether it existed (``False``: nothing written)."""

    @abc.abstractmethod
    async def due_hooks(self, now: int, limit: int) -> list[Hook]:
        """Up to ``limit`` hooks whose ``next_due`` is at or before ``now``, the earliest
        first."""

    @abc.abstractmethod
    async def insert_last_fire(self, fire: LastFire) -> bool:
        """Record a fire; ``False`` (nothing written) when the hook already has a fire of that
        taskId."""

    @abc.abstractmethod
    async def expire_last_fires(self, before: int, limit: int) -> int:
        """Delete up to ``limit`` last fires created before ``before``, the oldest first; how
        many."""

    @abc.abstractmethod
    async def last_fires(
        self, hook_group_id: str, hook_id: str, *, limit: int, before: tuple[int, str] | None
    ) -> list[LastFire]:
        """Up to ``limit`` of the hook's fires, the newest first (by ``task_create_time``, then
        taskId), from the one ``before`` is of (``(task_create_time, task_id)``; ``None``:
        the newest)."""
