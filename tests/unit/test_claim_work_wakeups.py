"""claimWork's wake-ups (:mod:`coordinator.service.claim_work`), without I/O: a ring wakes one
waiting call at a time, which hands it on unless its ask drained the queue, and a new call does
not ask a queue found drained since the last ring.

The work source is a list in memory that counts its asks: what is tested is when the calls ask
it, which a store would hide.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from coordinator.domain.claim_weights import ClaimWeights
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_queues import TaskQueue
from coordinator.service.claim_work import ClaimWork
from coordinator.service.metrics import ServiceMetrics
from coordinator.service.queue_controls import KeyLimit, QueueControlService
from coordinator.service.tasks import TaskService
from coordinator.store.base import Store
from devharness.waiting import wait_until
from tests.fixtures.records import new_record

QUEUE = TaskQueue("prov", "wt")
LONG_S = 60.0
"""Longer than any test: no call ends or asks again by its timeout or idle poll."""


class Runs:
    """The queue's pending runs, and the asks each worker made of them."""

    def __init__(self) -> None:
        self.pending: list[TaskRecord] = []
        self.asks: list[str] = []
        self._made = 0

    def add(self, count: int) -> None:
        self.pending += [new_record(f"t{self._made + index}") for index in range(count)]
        self._made += count

    async def take(
        self,
        task_queue: TaskQueue,
        *,
        worker_group: str,
        worker_id: str,
        count: int,
        weights: ClaimWeights | None,
        per_key: KeyLimit | None = None,
    ) -> list[TaskRecord]:
        self.asks.append(worker_id)
        taken, self.pending = self.pending[:count], self.pending[count:]
        return taken


def claim_work(
    runs: Runs, *, every_run_rings: bool = True, idle_poll_s: float = LONG_S
) -> ClaimWork:
    # A queue without controls passes the gate without it reading anything.
    gate = QueueControlService(
        store=cast(Store, None), service=cast(TaskService, None), metrics=cast(ServiceMetrics, None)
    )
    return ClaimWork(
        source=runs,
        controls=gate,
        timeout_s=LONG_S,
        idle_poll_s=idle_poll_s,
        every_run_rings=every_run_rings,
    )


def calling(
    work: ClaimWork,
    worker_id: str,
    count: int,
    *,
    gone: Callable[[], bool] = lambda: False,
    quarantined: Callable[[], bool] = lambda: False,
    weights: ClaimWeights | None = None,
) -> asyncio.Task[list[TaskRecord]]:
    return asyncio.create_task(
        work.claim(
            QUEUE,
            worker_group="wg",
            worker_id=worker_id,
            count=count,
            weights=weights,
            disconnected=gone,
            quarantined=quarantined,
        )
    )


async def settle() -> None:
    """Let every call run until it waits (a few turns of the loop: none does I/O)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_ring_wakes_one_waiting_call_and_one_that_drains_the_queue_keeps_it() -> None:
    runs = Runs()
    work = claim_work(runs)
    first, second = calling(work, "a", 4), calling(work, "b", 4)
    await settle()
    assert runs.asks == ["a"]  # "a" found nothing; both wait

    runs.add(3)
    work.wake(QUEUE)
    assert len(await first) == 3
    await settle()
    assert runs.asks == ["a", "a"]  # the second was not woken to find nothing
    assert not second.done()

    runs.add(1)
    work.wake(QUEUE)
    assert len(await second) == 1


async def test_the_rings_of_one_turn_wake_one_call_whose_ask_sees_all_their_runs() -> None:
    runs = Runs()
    work = claim_work(runs)
    calls = [calling(work, name, 4) for name in "abc"]
    await settle()

    for _ in range(3):  # as a createTasks of three tasks rings once for each
        runs.add(1)
        work.wake(QUEUE)
    assert len(await calls[0]) == 3
    await settle()
    assert runs.asks == ["a", "a"]
    assert not calls[1].done() and not calls[2].done()

    runs.add(1)
    work.wake(QUEUE)  # "a" asked since: this ring is for the next
    assert len(await calls[1]) == 1
    calls[2].cancel()


async def test_a_call_that_took_all_it_asked_for_hands_the_ring_on() -> None:
    runs = Runs()
    work = claim_work(runs)
    first, second, third = calling(work, "a", 2), calling(work, "b", 2), calling(work, "c", 2)
    await settle()

    runs.add(3)
    work.wake(QUEUE)
    assert [len(await first), len(await second)] == [2, 1]
    await settle()
    assert runs.asks == ["a", "a", "b"]  # the second drained it: the third sleeps on
    assert not third.done()
    third.cancel()


async def test_a_new_call_waits_without_asking_a_queue_drained_since_the_last_ring() -> None:
    runs = Runs()
    work = claim_work(runs)
    waiting = calling(work, "a", 4)
    await settle()
    assert runs.asks == ["a"]

    later = calling(work, "b", 4)
    await settle()
    assert runs.asks == ["a"]  # nothing has rung since "a" found the queue drained

    runs.add(5)
    work.wake(QUEUE)
    assert len(await waiting) == 4  # took all it asked for: the ring goes on to "b"
    assert len(await later) == 1
    assert runs.asks == ["a", "a", "b"]


async def test_a_woken_call_that_cannot_claim_hands_the_ring_on() -> None:
    runs = Runs()
    work = claim_work(runs)
    quarantined = calling(work, "q", 4, quarantined=lambda: runs.asks.count("q") > 0)
    leaving = False
    gone = calling(work, "g", 4, gone=lambda: leaving)
    cancelled = calling(work, "c", 4)
    served = calling(work, "s", 4)
    await settle()
    assert runs.asks == ["q"]

    runs.add(1)
    leaving = True
    cancelled.cancel()  # its client went away: aiohttp cancels its handler
    work.wake(QUEUE)
    assert len(await served) == 1
    assert await gone == []
    assert runs.asks == ["q", "s"]
    assert not quarantined.done()
    quarantined.cancel()


async def test_without_every_run_ringing_a_ring_wakes_every_waiting_call() -> None:
    # Azure dispatch: a hint put by another replica rings nothing here, so an ask that takes
    # fewer runs than it could does not tell the others that nothing is left.
    runs = Runs()
    work = claim_work(runs, every_run_rings=False)
    calls = [calling(work, name, 4) for name in "abc"]
    await settle()

    runs.add(1)
    work.wake(QUEUE)
    await wait_until(lambda: len(runs.asks) == 6, within=5, what="every call asked again")
    assert sorted(len(call.result()) for call in calls if call.done()) == [1]
    later = calling(work, "d", 4)
    await settle()
    assert runs.asks[-1] == "d"  # a new call asks at once
    for call in [*calls, later]:
        call.cancel()


async def test_a_ring_that_no_waiting_call_can_use_goes_round_once() -> None:
    runs = Runs()
    work = claim_work(runs)
    checks: list[str] = []

    def quarantined(name: str) -> Callable[[], bool]:
        def check() -> bool:  # always quarantined; counts the checks
            checks.append(name)
            return True

        return check

    calls = [calling(work, name, 4, quarantined=quarantined(name)) for name in "ab"]
    await settle()
    assert checks == ["a", "b"]

    runs.add(1)
    work.wake(QUEUE)
    await settle()
    await settle()
    # each was woken once and handed the ring on; the ring does not come back to them
    assert checks == ["a", "b", "a", "b"]
    assert runs.pending and not runs.asks
    for call in calls:
        call.cancel()


# --- handing new runs to waiting calls --------------------------------------------------


async def test_a_create_takes_the_longest_waiting_ready_calls_until_they_cover_its_runs() -> None:
    runs = Runs()
    work = claim_work(runs)
    quarantined = calling(work, "q", 4, quarantined=lambda: True)
    weighted = calling(work, "w", 4, weights=ClaimWeights.parse({"low": 1}))
    first, second, third = calling(work, "a", 2), calling(work, "b", 2), calling(work, "c", 2)
    await settle()
    assert work.waiting(QUEUE) == 5

    takers = work.hand_over(QUEUE, 3)

    assert [(t.worker_id, t.count) for t in takers] == [("a", 2), ("b", 2)]
    assert work.waiting(QUEUE) == 3  # the quarantined, the weighted and the third wait on
    made = [new_record(f"h{index}") for index in range(3)]
    takers[0].give(made[:2])
    runs.add(1)  # say, the task existed already, pending
    takers[1].give([])  # the create wrote none of its runs: the call asks the store again
    assert await first == made[:2]
    assert len(await second) == 1
    assert runs.asks[-1] == "b"
    for call in (quarantined, weighted, third):
        assert not call.done()
        call.cancel()


async def test_a_call_handed_to_a_create_waits_past_its_poll_for_the_runs() -> None:
    runs = Runs()
    work = claim_work(runs, idle_poll_s=0.05)
    call = calling(work, "a", 2)
    await settle()
    (taker,) = work.hand_over(QUEUE, 1)

    await asyncio.sleep(0.2)  # the create's write outlasts the poll's pause: the call waits
    assert not call.done()
    made = [new_record("h")]
    taker.give(made)
    assert await call == made


async def test_no_call_is_handed_over_without_every_run_ringing() -> None:
    runs = Runs()
    work = claim_work(runs, every_run_rings=False)
    call = calling(work, "a", 2)
    await settle()
    assert work.hand_over(QUEUE, 1) == []
    call.cancel()
