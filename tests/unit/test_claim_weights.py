"""claimWork's weights per priority (coordinator.domain.claim_weights): what they accept and
the draw that shares a claim out among the priorities with claimable runs."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from coordinator.domain.claim_weights import DEFAULT_WEIGHTS, ClaimWeights
from coordinator.domain.errors import InputError
from coordinator.domain.task_queues import PRIORITIES, priority_at_level


def test_a_priority_left_out_keeps_the_sdks_default_weight() -> None:
    weights = ClaimWeights.parse({"lowest": 20})
    assert weights.by_level == {7: 64.0, 6: 32.0, 5: 16.0, 4: 8.0, 3: 4.0, 2: 2.0, 1: 20.0}
    assert ClaimWeights.parse({}).by_level[1] == DEFAULT_WEIGHTS["lowest"] == 1.0


@pytest.mark.parametrize("weight", [0, -1, math.nan, math.inf, True, "2", None])
def test_a_weight_that_is_not_a_positive_finite_number_is_refused(weight: object) -> None:
    with pytest.raises(InputError, match="the weights of lowest must be positive numbers"):
        ClaimWeights.parse({"lowest": weight, "high": 3})


def test_every_unknown_priority_and_bad_weight_is_named_at_once() -> None:
    with pytest.raises(InputError) as refused:
        ClaimWeights.parse({"urgent": 1, "normal": 1, "low": 0, "medium": -1, "high": 2})
    assert str(refused.value) == (
        "weights: unknown priorities normal, urgent (one of highest, very-high, high, medium, "
        "low, very-low, lowest); the weights of low, medium must be positive numbers"
    )


def test_the_draw_never_takes_more_than_a_level_has_or_the_limit() -> None:
    weights = ClaimWeights.parse({})
    rng = random.Random(3)
    assert weights.quotas({7: 2, 1: 1, 4: 0}, 10, rng) == {7: 2, 1: 1}
    assert sum(weights.quotas({7: 32, 1: 32}, 5, rng).values()) == 5
    assert weights.quotas({}, 5, rng) == {}


def test_the_draw_shares_runs_in_proportion_to_the_weights() -> None:
    weights = ClaimWeights.parse({"lowest": 20, "highest": 60})
    rng = random.Random(11)
    drawn: Counter[int] = Counter()
    for _ in range(8000):
        drawn.update(weights.quotas({7: 5, 1: 5}, 1, rng))
    # 20 of 80: a quarter, the binomial's standard deviation about 39
    assert 1800 <= drawn[1] <= 2200, drawn


def test_a_blind_draw_shares_the_limit_out_by_priority_name() -> None:
    """Under Azure dispatch each priority is taken to hold enough: the draw is over all seven."""
    weights = ClaimWeights.parse({"lowest": 20})
    rng = random.Random(5)
    assert sum(weights.blind_quotas(32, rng).values()) == 32
    drawn: Counter[str] = Counter()
    for _ in range(7300):
        drawn.update(weights.blind_quotas(1, rng))
    assert set(drawn) == set(DEFAULT_WEIGHTS)
    # 20 of 146: 1000 of 7300, the binomial's standard deviation about 29
    assert 900 <= drawn["lowest"] <= 1100, drawn
    assert [priority_at_level(level) for level in range(7, 0, -1)] == list(PRIORITIES)
