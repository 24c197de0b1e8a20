"""Claim floors (:mod:`coordinator.store.claim_floors`): where a PostgreSQL claim starts
reading each priority level, raised by what each claim read, and dropped for a whole read once
every :data:`~coordinator.store.claim_floors.RESCAN_MS`."""

from __future__ import annotations

from coordinator.domain.task_queues import TaskQueue
from coordinator.store.claim_floors import LEVELS, RESCAN_MS, SETTLE_MS, ClaimFloors

QUEUE = TaskQueue("prov", "wt")
NOW = 1_700_000_000_000
SETTLED = NOW - SETTLE_MS
EVERY_LEVEL = dict.fromkeys(LEVELS, 10)
"""A claim in priority order of up to 10 runs asks every level for 10."""


def claimed(
    floors: ClaimFloors, read: list[tuple[int, int]], *, limit: int = 10, now: int = NOW
) -> dict[int, int]:
    """``floors`` after a claim in priority order that read ``read``, as the next claim
    reads them."""
    floors.advance(QUEUE, now, limit, dict.fromkeys(LEVELS, limit), read)
    return floors.reading(QUEUE, now)


def started() -> ClaimFloors:
    """Floors whose queue was just read whole."""
    floors = ClaimFloors()
    assert floors.reading(QUEUE, NOW) == {}
    return floors


def test_levels_are_read_highest_first() -> None:
    assert LEVELS == [7, 6, 5, 4, 3, 2, 1]


def test_a_claim_that_did_not_fill_up_settles_every_level() -> None:
    assert claimed(started(), [(4, NOW - 5)]) == dict.fromkeys(LEVELS, SETTLED)


def test_a_claim_that_filled_up_at_a_level_settles_those_before_and_leaves_those_after() -> None:
    backlog = NOW - 10 * SETTLE_MS
    read = [(6, NOW - 2), (4, backlog), (4, backlog + 1)]
    floors = claimed(started(), read, limit=3)
    assert floors == {7: SETTLED, 6: SETTLED, 5: SETTLED, 4: backlog}


def test_a_level_read_at_runs_younger_than_the_settling_time_is_floored_by_it() -> None:
    floors = claimed(started(), [(1, NOW - 3), (1, NOW - 2)], limit=2)
    assert floors[1] == SETTLED


def test_a_weighted_claim_settles_the_drawn_levels_it_emptied_and_no_other() -> None:
    floors = started()
    backlog = NOW - 10 * SETTLE_MS
    read = [(7, backlog), (7, backlog + 5), (2, backlog + 1)]
    floors.advance(QUEUE, NOW, 10, {7: 2, 2: 3}, read)
    # level 7 gave all it was asked for: there may be more behind them
    assert floors.reading(QUEUE, NOW) == {7: backlog, 2: SETTLED}


def test_floors_never_go_down() -> None:
    floors = started()
    claimed(floors, [])
    # a claim whose snapshot is older, and that read runs behind the floor another left
    floors.advance(QUEUE, NOW - 500, 1, dict.fromkeys(LEVELS, 1), [(1, NOW - 9 * SETTLE_MS)])
    assert floors.reading(QUEUE, NOW) == dict.fromkeys(LEVELS, SETTLED)


def test_a_claim_of_nothing_learns_nothing() -> None:
    assert claimed(started(), [], limit=0) == {}


def test_every_rescan_interval_and_after_the_clock_went_back_the_queue_is_read_whole() -> None:
    floors = started()
    claimed(floors, [])
    assert floors.reading(QUEUE, NOW + RESCAN_MS - 1) == dict.fromkeys(LEVELS, SETTLED)
    assert floors.reading(QUEUE, NOW + RESCAN_MS) == {}
    floors.advance(QUEUE, NOW + RESCAN_MS, 10, EVERY_LEVEL, [])
    assert floors.reading(QUEUE, NOW + RESCAN_MS - 1) == {}


def test_a_queue_not_read_since_its_rescan_is_not_advanced() -> None:
    floors = ClaimFloors()
    floors.advance(QUEUE, NOW, 10, EVERY_LEVEL, [])
    assert floors.reading(QUEUE, NOW) == {}


def test_the_least_recently_claimed_queues_are_forgotten_beyond_the_bound() -> None:
    floors = ClaimFloors(max_queues=2)
    queues = [TaskQueue("prov", name) for name in ("a", "b", "c")]
    for queue in queues[:2]:
        floors.reading(queue, NOW)
        floors.advance(queue, NOW, 10, EVERY_LEVEL, [])
    floors.reading(queues[0], NOW)  # a is now the most recent
    floors.reading(queues[2], NOW)
    assert floors.reading(queues[0], NOW) == dict.fromkeys(LEVELS, SETTLED)
    assert floors.reading(queues[1], NOW) == {}  # forgotten, read whole
