"""The pure rules of concurrency keys (coordinator.domain.concurrency_keys): which runs a keyed
store-dispatch claim takes (serve_keys), and the room a claim of a named run has (KeyRoom)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pytest

from coordinator.domain import lifecycle
from coordinator.domain.concurrency_keys import (
    FULL_KEY_RETRY_AFTER_MS,
    UNKEYED,
    Candidate,
    Key,
    KeyRoom,
    serve_keys,
)
from coordinator.domain.errors import Throttled
from coordinator.domain.records import TaskRecord, record_from_definition
from coordinator.domain.task_queues import TaskQueue
from tests.fixtures.records import NOW, TIMING, definition

QUEUE = TaskQueue("prov", "wt")


def backlog(key: Key, runs: int, *, level: int = 1) -> list[Candidate]:
    """``runs`` candidates of ``key`` at ``level``, the earliest visible first."""
    return [Candidate(f"{key}-{level}-{n}", level, key) for n in range(runs)]


def keys_of(chosen: list[Candidate]) -> list[Key]:
    return [candidate.key for candidate in chosen]


def test_keys_take_turns_within_a_priority_however_long_one_backlog_is() -> None:
    candidates = backlog("a", 30) + backlog("b", 2) + backlog("c", 30)
    served = serve_keys(candidates, running={}, turns={}, max_per_key=10, limit=7)
    assert keys_of(served.chosen) == ["a", "b", "c", "a", "b", "c", "a"]
    # each key's runs in the order given: its earliest visible first
    assert [c.task_id for c in served.chosen if c.key == "a"] == ["a-1-0", "a-1-1", "a-1-2"]
    # the turn numbers go on from none: each key's is its last run's
    assert served.turns == {"a": 7, "b": 5, "c": 6}


def test_the_key_served_longest_ago_goes_first() -> None:
    candidates = backlog("a", 5) + backlog("b", 5) + backlog("c", 5)
    served = serve_keys(
        candidates, running={}, turns={"a": 12, "b": 10, "c": 11}, max_per_key=5, limit=4
    )
    assert keys_of(served.chosen) == ["b", "c", "a", "b"]
    assert served.turns == {"b": 16, "c": 14, "a": 15}
    # a key never served (turn 0) goes before every key served
    fresh = serve_keys(
        candidates + backlog("d", 1), running={}, turns={"a": 1}, max_per_key=5, limit=2
    )
    assert keys_of(fresh.chosen) == ["b", "c"]


def test_one_claim_after_another_shares_the_runs_out_evenly() -> None:
    turns: dict[Key, int] = {}
    counts: Counter[Key] = Counter()
    for _ in range(9):  # runs finish at once: nothing stays running
        served = serve_keys(
            backlog("a", 30) + backlog("b", 30) + backlog("c", 30),
            running={},
            turns=turns,
            max_per_key=2,
            limit=1,
        )
        counts.update(keys_of(served.chosen))
        turns.update(served.turns)
    assert counts == {"a": 3, "b": 3, "c": 3}


def test_a_key_at_its_limit_is_skipped_and_one_near_it_gets_its_room_only() -> None:
    candidates = backlog("full", 5) + backlog("near", 5) + backlog("free", 5)
    served = serve_keys(
        candidates, running={"full": 2, "near": 1}, turns={}, max_per_key=2, limit=10
    )
    assert Counter(keys_of(served.chosen)) == {"near": 1, "free": 2}


def test_a_higher_priority_goes_first_whatever_the_turns() -> None:
    candidates = backlog("late", 2, level=7) + backlog("due", 2, level=4)
    served = serve_keys(candidates, running={}, turns={"late": 9}, max_per_key=5, limit=3)
    assert [(c.key, c.level) for c in served.chosen] == [("late", 7), ("late", 7), ("due", 4)]


def test_tasks_without_a_key_are_one_group_in_the_rotation_and_never_limited() -> None:
    candidates = backlog(UNKEYED, 10) + backlog("a", 10)
    served = serve_keys(candidates, running={"a": 0}, turns={}, max_per_key=1, limit=5)
    assert keys_of(served.chosen) == [UNKEYED, "a", UNKEYED, UNKEYED, UNKEYED]
    assert served.turns == {UNKEYED: 5, "a": 2}


def test_weights_draw_the_levels_and_the_keys_take_turns_within_each() -> None:
    candidates = (
        backlog("a", 5, level=7) + backlog("b", 5, level=7) + backlog("a", 5, level=1)
    ) + backlog("c", 5, level=1)
    offered: list[Mapping[int, int]] = []

    def pick(claimable: Mapping[int, int]) -> Mapping[int, int]:
        offered.append(claimable)
        return {7: 2, 1: 2}

    served = serve_keys(candidates, running={"a": 1}, turns={}, max_per_key=3, limit=4, pick=pick)
    # each level offers what its keys have room for: "a" has 2 of its 3 left
    assert offered == [{7: 4, 1: 4}]
    assert [(c.key, c.level) for c in served.chosen] == [("a", 7), ("b", 7), ("c", 1), ("a", 1)]


def keyed(task_id: str, key: str | None) -> TaskRecord:
    body = definition()
    if key is not None:
        body["concurrencyKey"] = key
    return lifecycle.create(record_from_definition(task_id, body), now=NOW).record


def test_a_key_room_lets_claims_through_up_to_the_limit_and_then_refuses() -> None:
    room = KeyRoom(QUEUE, max_per_key=2, running={"a": 1})
    room.admit(keyed("a1", "a"), 0)
    room.admit(keyed("a1", "a"), 0)  # the same run again (a claim retried): counted once
    with pytest.raises(Throttled) as refused:
        room.admit(keyed("a2", "a"), 0)
    assert refused.value.retry_after_ms == FULL_KEY_RETRY_AFTER_MS
    assert str(refused.value) == (
        "concurrency key 'a' of task queue prov/wt has 2 runs running, its maxRunningPerKey is 2"
    )
    room.admit(keyed("b1", "b"), 0)  # another key has its own room
    room.admit(keyed("b2", "b"), 0)
    for n in range(5):
        room.admit(keyed(f"none{n}", None), 0)  # without a key: never limited


def test_a_key_room_leaves_runs_that_are_not_pending_to_the_claim() -> None:
    room = KeyRoom(QUEUE, max_per_key=1, running={"a": 1})
    running = lifecycle.claim(
        keyed("a1", "a"), run_id=0, worker_group="g", worker_id="w", now=NOW, timing=TIMING
    ).record
    room.admit(running, 0)  # the same worker's claim again: the claim answers it
    room.admit(keyed("a2", "a"), 3)  # no such run: the claim refuses it
    with pytest.raises(Throttled):
        room.admit(keyed("a3", "a"), 0)
