"""Concurrency keys: a task's optional ``concurrencyKey`` (a tenant, a customer, an account)
and its task queue's ``maxRunningPerKey``, the most runs of one key running at once. Two pure
rules, one per way a claim finds its runs:

- :func:`serve_keys`, for store dispatch, which chooses the runs itself: which of the queue's
  claimable runs a claim takes. The highest priority first, as always; within a priority the
  keys take turns, the key served longest ago first, one run at a time, so one key's backlog
  never holds another key's runs back; a key at its limit is skipped.
- :class:`KeyRoom`, for claims of a run the worker names (claimTask, claimRuns, claimWork over
  Azure's hints): the run is refused with :class:`~coordinator.domain.errors.Throttled` while
  its key is at its limit.

Tasks without a key are one group of their own in the rotation (:data:`UNKEYED`), never
limited. Turns are claim sequence numbers: a key's turn number is the number of the last of
its runs claimed; a key never served has 0.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from coordinator.domain.errors import Throttled
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_queues import TaskQueue

FULL_KEY_RETRY_AFTER_MS = 1_000
"""When a claim refused because its key has ``maxRunningPerKey`` runs running may try again."""

UNKEYED: None = None
"""The group of the tasks without a key, in the rotation and in :attr:`Served.turns`."""

Key = str | None


@dataclass(frozen=True, slots=True)
class Candidate:
    """A claimable run as a keyed claim first reads it: its task, its priority level (7
    highest … 1 lowest) and its key."""

    task_id: str
    level: int
    key: Key


@dataclass(frozen=True, slots=True)
class Served:
    """What a keyed claim takes: the runs, in the order to claim them, and each key served's
    new turn number."""

    chosen: list[Candidate]
    turns: dict[Key, int] = field(default_factory=dict)


def serve_keys(
    candidates: Iterable[Candidate],
    *,
    running: Mapping[str, int],
    turns: Mapping[Key, int],
    max_per_key: int,
    limit: int,
    pick: Callable[[Mapping[int, int]], Mapping[int, int]] | None = None,
) -> Served:
    """Up to ``limit`` of ``candidates`` (each key's and level's earliest visible first) for
    one claim, with ``running`` runs of each key running and ``turns`` each key's turn number.

    :param pick: a worker's weights (:meth:`ClaimWeights.quotas
        <coordinator.domain.claim_weights.ClaimWeights.quotas>`): given how many runs each
        level could give, how many to take of each; the keys take turns within each level's
        share. Without it, the levels are served highest first until ``limit``.
    """
    room = {key: max_per_key - count for key, count in running.items()}
    by_level: dict[int, dict[Key, deque[Candidate]]] = {}
    for candidate in candidates:
        by_level.setdefault(candidate.level, {}).setdefault(candidate.key, deque()).append(
            candidate
        )

    def room_of(key: Key) -> int:
        return limit if key is UNKEYED else room.get(key, max_per_key)

    if pick is None:
        quotas: Mapping[int, int] = dict.fromkeys(by_level, limit)
    else:
        claimable = {
            level: min(limit, sum(min(room_of(key), len(runs)) for key, runs in keys.items()))
            for level, keys in by_level.items()
        }
        quotas = pick({level: runs for level, runs in claimable.items() if runs > 0})
    number = max(turns.values(), default=0)
    served = dict(turns)
    chosen: list[Candidate] = []
    for level in sorted(by_level, reverse=True):
        keys = by_level[level]
        quota = min(quotas.get(level, 0), limit - len(chosen))
        taken = 0
        while taken < quota:
            ready = [key for key, runs in keys.items() if runs and room_of(key) > 0]
            if not ready:
                break
            key = min(ready, key=lambda k: (served.get(k, 0), k is not UNKEYED, k or ""))
            chosen.append(keys[key].popleft())
            if key is not UNKEYED:
                room[key] = room_of(key) - 1
            number += 1
            served[key] = number
            taken += 1
    return Served(chosen=chosen, turns={c.key: served[c.key] for c in chosen})


class KeyRoom:
    """The room each key of one task queue has for claims of runs the worker names, counted
    once under the queue's claim lock: ``running`` runs of each key running, and the claims
    let through since (a run let through twice, as a claim retried after a lost race is, is
    counted once)."""

    def __init__(self, task_queue: TaskQueue, *, max_per_key: int, running: Mapping[str, int]):
        self.task_queue = task_queue
        self.max_per_key = max_per_key
        self._running = dict(running)
        self._let_through: dict[str, set[str]] = {}

    def admit(self, record: TaskRecord, run_id: int) -> None:
        """Let the claim of ``record``'s run ``run_id`` through, or refuse it.

        :raises Throttled: the run is pending and its key has no room left.
        """
        key = record.concurrency_key
        if key is UNKEYED or run_id >= len(record.runs) or record.runs[run_id].state != "pending":
            return  # unkeyed, or a claim the task's own rules answer (a repeat, a stale run)
        let_through = self._let_through.setdefault(key, set())
        if record.task_id in let_through:
            return
        running = self._running.get(key, 0) + len(let_through)
        if running >= self.max_per_key:
            raise Throttled(
                f"concurrency key {key!r} of task queue {self.task_queue} has {running} runs "
                f"running, its maxRunningPerKey is {self.max_per_key}",
                retry_after_ms=FULL_KEY_RETRY_AFTER_MS,
            )
        let_through.add(record.task_id)
