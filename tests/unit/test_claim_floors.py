"""Claim floors (:mod:`coordinator.store.claim_floors`): where a PostgreSQL claim starts
reading each priority level, raised by what each claim read, and dropped for a whole read once
every :data:`~coordinator.store.claim_floors.RESCAN_MS`."""

from __future__ import annotations

from coordinator.domain.task_queues import TaskQueue
from coordinator.store.claim_floors import LEVELS, RESCAN_MS, SETTLE_MS, ClaimFloors

QUEUE = TaskQueue("prov", "wt")
NOW = 1_700_000_000_000
SETTLED = NOW - SETTLE_MS


def by_level(floors: list[int]) -> dict[int, int]:
    return dict(zip(LEVELS, floors, strict=True))


def test_levels_are_read_highest_first() -> None:
    assert LEVELS == [7, 6, 5, 4, 3, 2, 1]


def test_a_queue_is_read_whole_first_then_from_its_floors() -> None:
    floors = ClaimFloors()
    assert floors.reading(QUEUE, NOW) == [0] * 7
    floors.advance(QUEUE, NOW, 10, [(4, NOW - 5)])
    assert floors.reading(QUEUE, NOW + 1) == [SETTLED] * 7


def test_a_claim_that_filled_up_at_a_level_settles_the_levels_above_and_keeps_those_below() -> None:
    floors = ClaimFloors()
    floors.reading(QUEUE, NOW)
    backlog = NOW - 10 * SETTLE_MS
    floors.advance(QUEUE, NOW, 3, [(6, NOW - 2), (4, backlog), (4, backlog + 1)])
    read = by_level(floors.reading(QUEUE, NOW))
    assert read == {7: SETTLED, 6: SETTLED, 5: SETTLED, 4: backlog, 3: 0, 2: 0, 1: 0}


def test_a_level_read_at_runs_younger_than_the_settling_time_is_floored_by_it() -> None:
    floors = ClaimFloors()
    floors.reading(QUEUE, NOW)
    floors.advance(QUEUE, NOW, 2, [(1, NOW - 3), (1, NOW - 2)])
    assert by_level(floors.reading(QUEUE, NOW))[1] == SETTLED


def test_floors_never_go_down() -> None:
    floors = ClaimFloors()
    floors.reading(QUEUE, NOW)
    floors.advance(QUEUE, NOW, 5, [])
    # a claim whose snapshot is older, or that read runs behind the floor another left
    floors.advance(QUEUE, NOW - 500, 1, [(1, NOW - 9 * SETTLE_MS)])
    assert floors.reading(QUEUE, NOW) == [SETTLED] * 7


def test_a_claim_of_nothing_learns_nothing() -> None:
    floors = ClaimFloors()
    floors.reading(QUEUE, NOW)
    floors.advance(QUEUE, NOW, 0, [])
    assert floors.reading(QUEUE, NOW) == [0] * 7


def test_every_rescan_interval_and_after_the_clock_went_back_the_queue_is_read_whole() -> None:
    floors = ClaimFloors()
    floors.reading(QUEUE, NOW)
    floors.advance(QUEUE, NOW, 5, [])
    assert floors.reading(QUEUE, NOW + RESCAN_MS - 1) == [SETTLED] * 7
    assert floors.reading(QUEUE, NOW + RESCAN_MS) == [0] * 7
    floors.advance(QUEUE, NOW + RESCAN_MS, 5, [])
    assert floors.reading(QUEUE, NOW + RESCAN_MS - 1) == [0] * 7


def test_a_queue_not_read_since_its_rescan_is_not_advanced() -> None:
    floors = ClaimFloors()
    floors.advance(QUEUE, NOW, 5, [])
    assert floors.reading(QUEUE, NOW) == [0] * 7


def test_the_least_recently_claimed_queues_are_forgotten_beyond_the_bound() -> None:
    floors = ClaimFloors(max_queues=2)
    queues = [TaskQueue("prov", name) for name in ("a", "b", "c")]
    for queue in queues[:2]:
        floors.reading(queue, NOW)
        floors.advance(queue, NOW, 5, [])
    floors.reading(queues[0], NOW)  # a is now the most recent
    floors.reading(queues[2], NOW)
    assert floors.reading(queues[0], NOW) == [SETTLED] * 7
    assert floors.reading(queues[1], NOW) == [0] * 7  # forgotten, read whole
