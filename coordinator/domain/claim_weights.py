"""A worker's weights per priority (claimWork's ``weights``), and the weighted draw that shares
a claim out among the priorities that have claimable work.

Without weights store dispatch claims strictly by priority, the highest first, so a busy high
priority starves the lower ones. With them each run a claim takes comes from a priority drawn
at random in proportion to its weight among the priorities that still have claimable runs
(then the oldest run of it): a priority with work gets about ``w / Σw`` of the claims over
those, and none starves. A priority the worker leaves out keeps its default weight, the
worker SDK's ``--polling weighted`` defaults: ``2 ** (level - 1)``, ``highest`` 64 …
``lowest`` 1.

Under Azure dispatch what each priority's queue holds is not known before receiving from it:
:meth:`ClaimWeights.blind_quotas` draws as if every priority had enough, and the caller gives
what a drawn priority could not fill to the others.

Everything here is pure (the random source is passed in).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.domain.errors import InputError
from coordinator.domain.task_queues import PRIORITIES, priority_at_level, priority_level

DEFAULT_WEIGHTS: Mapping[str, float] = {
    priority: float(2 ** (priority_level(priority) - 1)) for priority in PRIORITIES
}
"""The weight of a priority the worker leaves out: the worker SDK's defaults."""


@dataclass(frozen=True, slots=True)
class ClaimWeights:
    """Weights by priority level (7 ``highest`` … 1 ``lowest``), every level present."""

    by_level: Mapping[int, float]

    @classmethod
    def parse(cls, given: Mapping[str, Any]) -> ClaimWeights:
        """claimWork's ``weights``: the defaults with ``given``'s; :class:`InputError` naming
        every unknown priority and every weight that is not a positive finite number."""
        unknown = sorted(priority for priority in given if priority not in DEFAULT_WEIGHTS)
        bad = sorted(
            priority
            for priority, weight in given.items()
            if priority in DEFAULT_WEIGHTS and not _positive_number(weight)
        )
        problems = []
        if unknown:
            problems.append(
                f"unknown priorities {', '.join(unknown)} (one of {', '.join(PRIORITIES)})"
            )
        if bad:
            problems.append(f"the weights of {', '.join(bad)} must be positive numbers")
        if problems:
            raise InputError("weights: " + "; ".join(problems))
        weights = {**DEFAULT_WEIGHTS, **given}
        return cls({priority_level(p): float(w) for p, w in weights.items()})

    def quotas(
        self, claimable: Mapping[int, int], limit: int, rng: random.Random
    ) -> dict[int, int]:
        """How many runs of each level to claim, up to ``limit`` in all: each run's level
        drawn in proportion to the weights among the levels with ``claimable`` runs left.

        :param claimable: each level's claimable runs (levels without any may be left out).
        """
        left = {level: count for level, count in claimable.items() if count > 0}
        taken: dict[int, int] = {}
        for _ in range(limit):
            if not left:
                break
            levels = list(left)
            (level,) = rng.choices(levels, weights=[self.by_level[level] for level in levels])
            taken[level] = taken.get(level, 0) + 1
            left[level] -= 1
            if not left[level]:
                del left[level]
        return taken

    def blind_quotas(self, limit: int, rng: random.Random) -> dict[str, int]:
        """:meth:`quotas` of ``limit`` runs by priority name, every priority taken to have
        ``limit`` claimable runs (Azure's queues, unknown until received from)."""
        drawn = self.quotas(dict.fromkeys(self.by_level, limit), limit, rng)
        return {priority_at_level(level): count for level, count in drawn.items()}


def _positive_number(weight: object) -> bool:
    # bool is an int to Python but not a number to JSON
    return (
        isinstance(weight, int | float)
        and not isinstance(weight, bool)
        and math.isfinite(weight)
        and weight > 0
    )
