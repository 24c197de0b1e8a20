"""The task-queue controls part of the store contract: pause, limits and defaults, the rate
limit's state, and the claim lock that makes counting a queue's running runs and claiming one step.
"""

from __future__ import annotations

import abc
import contextlib

from coordinator.domain.queue_controls import Limits, Pause, QueueControls, QueueDefaults
from coordinator.domain.task_queues import TaskQueue


class QueueControlStore(abc.ABC):
    """Task queues' pause, limits, defaults and claim lock."""

    @abc.abstractmethod
    async def queue_controls(self) -> list[QueueControls]:
        """Every task queue paused, limited or with a default."""

    @abc.abstractmethod
    async def queue_controls_of(self, task_queue: TaskQueue) -> QueueControls:
        """The controls of one task queue (none set: the default)."""

    @abc.abstractmethod
    async def pause_task_queue(self, task_queue: TaskQueue, pause: Pause | None) -> QueueControls:
        """Pause the queue (a queue paused already keeps its ``since`` and takes the new
        reason), or resume it with ``None``; its controls as now stored."""

    @abc.abstractmethod
    async def limit_task_queue(
        self, task_queue: TaskQueue, limits: Limits, *, named: frozenset[str]
    ) -> QueueControls:
        """Set those of the queue's limits whose wire names (``maxRunning``,
        ``maxClaimsPerSecond``, ``maxRunningPerKey``) are in ``named`` to their value in
        ``limits``; its controls as now stored."""

    @abc.abstractmethod
    async def default_task_queue(
        self, task_queue: TaskQueue, defaults: QueueDefaults, *, named: frozenset[str]
    ) -> QueueControls:
        """Set those of the queue's defaults whose wire names (``claimTimeout``,
        ``completedTTL``, ``failedTTL``) are in ``named`` to their value in ``defaults``; its
        controls as now stored."""

    @abc.abstractmethod
    async def set_claims_tat(self, task_queue: TaskQueue, claims_tat_us: int) -> None:
        """Store the queue's rate-limit state (its controls exist)."""

    @abc.abstractmethod
    async def give_back_claims(self, task_queue: TaskQueue, room_us: int) -> None:
        """Move the queue's rate-limit state ``room_us`` back, in one statement (without the
        queue's lock)."""

    @abc.abstractmethod
    async def running_by_key(self, task_queue: TaskQueue) -> dict[str, int]:
        """How many runs of the queue each concurrency key has running (keys with none, and
        tasks without a key, left out)."""

    @abc.abstractmethod
    def queue_lock(self, task_queue: TaskQueue) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold the queue's claim lock: one holder at a time per task queue, across every
        process sharing the store, so that counting its running runs and claiming are one
        step."""
