"""Task queues and priorities, and the order in which a worker polls its Azure queues.

A worker reads one Azure queue per (task queue, priority). :class:`PollOrder` arranges them
for each pass over the queues:

- ``strict`` (the default): highest priority first, and at equal priority the task queues in
  the order the worker was given them. A lower priority is polled only when every higher one
  came up empty, so it waits for as long as they have work: what Taskcluster promises.
- ``weighted``: a fresh random order each pass, by weighted sampling without replacement
  (Efraimidis-Spirakis: sort by ``u ** (1 / w)``, ``u`` uniform in (0, 1]). A queue comes
  first with probability ``w / Σw``, and first among the queues that have work with
  probability ``w / Σw`` over those, so each priority with work gets about that share of the
  claims and none starves. The default weights, ``2 ** (level - 1)``, keep the ladder steep:
  ``highest`` 64, ``very-high`` 32, … ``lowest`` 1.

Everything here is pure (the random source is passed in), so it is tested with plain values.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

PRIORITIES = ("highest", "very-high", "high", "medium", "low", "very-low", "lowest")
"""Taskcluster's priorities, highest first: the order of the queues ``pollTaskUrls`` lists."""

LEVELS = {priority: len(PRIORITIES) - index for index, priority in enumerate(PRIORITIES)}
"""``highest`` is 7 … ``lowest`` 1."""

DEFAULT_WEIGHTS: Mapping[str, float] = {
    priority: float(2 ** (level - 1)) for priority, level in LEVELS.items()
}

Polling = Literal["strict", "weighted"]
POLLINGS: tuple[Polling, ...] = ("strict", "weighted")

_IDENTIFIER = re.compile(r"^[a-zA-Z0-9_-]{1,38}$")

_T = TypeVar("_T")


@dataclass(frozen=True)
class TaskQueue:
    """A ``provisionerId/workerType`` pair: the tasks one set of Azure queues holds."""

    provisioner_id: str
    worker_type: str

    def __post_init__(self) -> None:
        for name, value in (
            ("provisionerId", self.provisioner_id),
            ("workerType", self.worker_type),
        ):
            if not _IDENTIFIER.match(value):
                raise ValueError(f"{name} {value!r} is not 1-38 of a-z A-Z 0-9 _ -")

    @classmethod
    def parse(cls, text: str) -> TaskQueue:
        """Read ``provisionerId/workerType``; ``ValueError`` for anything else."""
        provisioner_id, slash, worker_type = text.partition("/")
        if not slash:
            raise ValueError(f"task queue {text!r} is not provisionerId/workerType")
        return cls(provisioner_id, worker_type)

    def __str__(self) -> str:
        return f"{self.provisioner_id}/{self.worker_type}"


def task_queues_of(
    provisioner_id: str | None, worker_type: str | None, task_queues: Iterable[str | TaskQueue]
) -> tuple[TaskQueue, ...]:
    """A worker's task queues: ``provisioner_id/worker_type`` when given, then
    ``task_queues``, each once; ``ValueError`` for none, a malformed one, or half a pair."""
    if (provisioner_id is None) != (worker_type is None):
        raise ValueError("give the provisionerId and the workerType together, or neither")
    given = [TaskQueue.parse(q) if isinstance(q, str) else q for q in task_queues]
    if provisioner_id is not None and worker_type is not None:
        given.insert(0, TaskQueue(provisioner_id, worker_type))
    if not given:
        raise ValueError("a worker needs a task queue (or a provisionerId and a workerType)")
    return tuple(dict.fromkeys(given))


def priority_at(index: int) -> str:
    """The priority of the ``index``-th queue of a ``pollTaskUrls`` answer (highest first);
    any queue past the seventh counts as ``lowest``."""
    return PRIORITIES[min(index, len(PRIORITIES) - 1)]


def weights_with(overrides: Mapping[str, float]) -> dict[str, float]:
    """The default weights with ``overrides``; ``ValueError`` for an unknown priority or a
    weight that is not positive (a weight of 0 would starve its priority)."""
    weights = dict(DEFAULT_WEIGHTS)
    for priority, weight in overrides.items():
        if priority not in weights:
            raise ValueError(f"unknown priority {priority!r}: one of {', '.join(PRIORITIES)}")
        if not weight > 0:
            raise ValueError(f"the weight of {priority} must be positive, not {weight}")
        weights[priority] = float(weight)
    return weights


@dataclass(frozen=True, kw_only=True)
class PollOrder:
    """How a pass over the queues orders them; see the module docs."""

    polling: Polling = "strict"
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))

    def arrange(
        self, azure_queues: Sequence[_T], priority_of: Callable[[_T], str], rng: random.Random
    ) -> list[_T]:
        """``azure_queues`` in the order to poll them this pass."""
        if self.polling == "strict":
            # sorted is stable: at equal priority the given order stays.
            return sorted(azure_queues, key=lambda azure_queue: -LEVELS[priority_of(azure_queue)])
        # 1 - random() lies in (0, 1]: u = 0 would tie every weight at key 0.
        return sorted(
            azure_queues,
            key=lambda azure_queue: (
                (1.0 - rng.random()) ** (1.0 / self.weights[priority_of(azure_queue)])
            ),
            reverse=True,
        )
