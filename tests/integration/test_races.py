"""Races through the real HTTP server and real SQLite (docs/protocol.md: every transition is a
compare-and-set, so any number of callers, resolver loops and replicas may race and exactly
one wins).

Each test fires its contenders at once with ``asyncio.gather`` and then checks, from the
answers and the stored status, that exactly one change happened and the runs array is
consistent with the answers every contender got.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
import slugid

from coordinator.resolvers import claim_resolver
from coordinator.service.tasks import TaskService
from devharness.api import Response
from devharness.tasks import task_definition
from tests.fixtures.coordinator import FakeClock, RunningCoordinator, StartCoordinator, runs

CLAIM_TIMEOUT_S = 1_200
"""The fixture default (``Config.claim_timeout_ms``), in seconds."""


# --- helpers ----------------------------------------------------------------------------------


CLAIM_EXPIRED_AND_RETRIED = [
    ("exception", "scheduled", "claim-expired"),
    ("pending", "retry", None),
]


async def claimed_tasks(c: RunningCoordinator, clock: FakeClock, count: int) -> list[str]:
    """``count`` tasks, each with run 0 claimed by ``worker-<i>``."""
    task_ids = [slugid.nice() for _ in range(count)]
    created = await asyncio.gather(
        *(c.call("PUT", f"/task/{t}", task_definition(clock.now)) for t in task_ids)
    )
    assert [r.status for r in created] == [200] * count
    claims = await asyncio.gather(
        *(c.try_claim(t, worker_id=f"worker-{i}") for i, t in enumerate(task_ids))
    )
    assert [r.status for r in claims] == [200] * count, [r.body for r in claims]
    return task_ids


# --- claims -----------------------------------------------------------------------------------


async def test_fifty_workers_claiming_one_run_exactly_one_wins(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(run_resolvers=False)
    task_id = await c.create()
    workers = [f"worker-{i}" for i in range(50)]

    answers = await asyncio.gather(*(c.try_claim(task_id, worker_id=w) for w in workers))

    assert Counter(a.status for a in answers) == {200: 1, 409: 49}
    winner = next(w for w, a in zip(workers, answers, strict=True) if a.status == 200)
    won = next(a for a in answers if a.status == 200)
    assert won.body["workerId"] == winner
    for answer in answers:
        if answer.status == 409:
            assert answer.body["code"] == "RequestConflict"
    after = await c.status(task_id)
    assert runs(after) == [("running", "scheduled", None)]
    assert after["runs"][0]["workerGroup"] == "wg"
    assert after["runs"][0]["workerId"] == winner
    assert after["runs"][0]["takenUntil"] == won.body["takenUntil"]
    assert won.body["status"] == after


# --- resolver passes --------------------------------------------------------------------------


@pytest.mark.parametrize("replicas", [1, 2], ids=["one-service", "two-replicas"])
async def test_concurrent_claim_resolver_passes_resolve_each_run_exactly_once(
    start_coordinator: StartCoordinator, replicas: int
) -> None:
    clock = FakeClock()
    c = await start_coordinator(clock=clock, run_resolvers=False)
    main = c.parts.service
    # further TaskServices over the same store mimic coordinator replicas
    services = [main] + [
        TaskService(
            store=c.parts.store,
            hints=None,
            timing=main.timing,
            max_deadline_ms=main.max_deadline_ms,
            clock=clock,
        )
        for _ in range(replicas - 1)
    ]
    task_ids = await claimed_tasks(c, clock, 30)

    clock.advance(CLAIM_TIMEOUT_S + 1)
    passes = await asyncio.gather(
        *(claim_resolver.run_once(services[i % replicas]) for i in range(20))
    )

    assert sum(passes) == 30, passes
    for task_id in task_ids:
        after = await c.status(task_id)
        assert runs(after) == CLAIM_EXPIRED_AND_RETRIED, (task_id, after)
        assert after["retriesLeft"] == 4
    assert await claim_resolver.run_once(main) == 0


async def test_report_completed_racing_claim_expiry_has_exactly_one_outcome(
    start_coordinator: StartCoordinator,
) -> None:
    clock = FakeClock()
    c = await start_coordinator(clock=clock, run_resolvers=False)
    service = c.parts.service
    task_ids = await claimed_tasks(c, clock, 20)
    clock.advance(CLAIM_TIMEOUT_S + 1)

    reports = [
        asyncio.ensure_future(c.call("POST", f"/task/{t}/runs/0/completed")) for t in task_ids
    ]
    resolved, answers = await asyncio.gather(
        claim_resolver.run_once(service), asyncio.gather(*reports)
    )

    assert {a.status for a in answers} <= {200, 409}, [a.body for a in answers]
    assert resolved == sum(a.status == 409 for a in answers)
    for task_id, answer in zip(task_ids, answers, strict=True):
        after = await c.status(task_id)
        if answer.status == 200:
            # the worker's report landed first: the resolver then found nothing to expire
            assert runs(after) == [("completed", "scheduled", "completed")], after
            assert answer.body["status"] == after
        else:
            # the claim expired first: the report of a no-longer-running run is refused
            assert answer.body["code"] == "RequestConflict"
            assert runs(after) == CLAIM_EXPIRED_AND_RETRIED, after
            assert after["retriesLeft"] == 4
        assert after["runs"][0]["workerId"] == f"worker-{task_ids.index(task_id)}"


async def test_reports_and_a_resolver_pass_meeting_in_the_middle(
    start_coordinator: StartCoordinator,
) -> None:
    """The resolver pass walks the expired claims oldest first while a worker reports them
    one after another newest first: they meet somewhere in the middle and race there."""
    clock = FakeClock()
    c = await start_coordinator(clock=clock, run_resolvers=False)
    service = c.parts.service
    task_ids: list[str] = []
    for i in range(20):
        task_ids.append(await c.create(now_ms=clock.now))
        assert (await c.try_claim(task_ids[-1], worker_id=f"worker-{i}")).status == 200
        clock.advance(0.001)  # distinct takenUntil: the pass's order is task_ids' order
    clock.advance(CLAIM_TIMEOUT_S + 1)

    async def report_newest_first() -> dict[str, Response]:
        return {t: await c.call("POST", f"/task/{t}/runs/0/completed") for t in reversed(task_ids)}

    resolved, answers = await asyncio.gather(
        claim_resolver.run_once(service), report_newest_first()
    )

    statuses = [answers[t].status for t in task_ids]
    # the resolver took a prefix, the reports the rest; nothing was done twice or lost
    assert statuses == [409] * resolved + [200] * (20 - resolved), statuses
    for task_id in task_ids[:resolved]:
        assert runs(await c.status(task_id)) == CLAIM_EXPIRED_AND_RETRIED
    for task_id in task_ids[resolved:]:
        assert runs(await c.status(task_id)) == [("completed", "scheduled", "completed")]


async def test_reclaim_racing_claim_expiry_has_exactly_one_outcome(
    start_coordinator: StartCoordinator,
) -> None:
    clock = FakeClock()
    c = await start_coordinator(clock=clock, run_resolvers=False)
    service = c.parts.service
    task_ids = await claimed_tasks(c, clock, 20)
    clock.advance(CLAIM_TIMEOUT_S + 1)

    reclaims = [
        asyncio.ensure_future(c.call("POST", f"/task/{t}/runs/0/reclaim")) for t in task_ids
    ]
    resolved, answers = await asyncio.gather(
        claim_resolver.run_once(service), asyncio.gather(*reclaims)
    )

    assert {a.status for a in answers} <= {200, 409}, [a.body for a in answers]
    assert resolved == sum(a.status == 409 for a in answers)
    for task_id, answer in zip(task_ids, answers, strict=True):
        after = await c.status(task_id)
        if answer.status == 200:
            assert runs(after) == [("running", "scheduled", None)], after
            assert after["runs"][0]["takenUntil"] == answer.body["takenUntil"]
        else:
            assert runs(after) == CLAIM_EXPIRED_AND_RETRIED, after
    # the reclaimed runs now hold until a new takenUntil: a new pass leaves them alone
    assert await claim_resolver.run_once(service) == 0


# --- createTask -------------------------------------------------------------------------------


async def test_concurrent_create_task_with_the_same_body_makes_one_task(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(run_resolvers=False)
    task_id = slugid.nice()
    body = task_definition()

    answers = await asyncio.gather(*(c.call("PUT", f"/task/{task_id}", body) for _ in range(20)))

    assert [a.status for a in answers] == [200] * 20, [a.body for a in answers]
    after = await c.status(task_id)
    assert runs(after) == [("pending", "scheduled", None)]
    for answer in answers:
        assert answer.body["status"]["taskId"] == task_id
        assert answer.body["status"]["runs"] == after["runs"]
    group = await c.call("GET", f"/task-group/{task_id}/list")
    assert group.status == 200, group.body
    assert [t["status"]["taskId"] for t in group.body["tasks"]] == [task_id]


async def test_concurrent_create_task_with_different_bodies_one_wins(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(run_resolvers=False)
    task_id = slugid.nice()
    bodies = [task_definition() for _ in range(20)]
    for i, body in enumerate(bodies):
        body["metadata"] = {**body["metadata"], "name": f"contender {i}"}

    answers = await asyncio.gather(*(c.call("PUT", f"/task/{task_id}", b) for b in bodies))

    assert Counter(a.status for a in answers) == {200: 1, 409: 19}, [a.body for a in answers]
    winner = next(i for i, a in enumerate(answers) if a.status == 200)
    for answer in answers:
        if answer.status == 409:
            assert answer.body["code"] == "RequestConflict"
    stored = await c.call("GET", f"/task/{task_id}")
    assert stored.status == 200, stored.body
    assert stored.body["metadata"]["name"] == f"contender {winner}"
    # the winner's body is now the idempotent one; every other still conflicts
    again = await c.call("PUT", f"/task/{task_id}", bodies[winner])
    assert again.status == 200, again.body
    loser = bodies[(winner + 1) % len(bodies)]
    assert (await c.call("PUT", f"/task/{task_id}", loser)).status == 409
    assert runs(await c.status(task_id)) == [("pending", "scheduled", None)]
