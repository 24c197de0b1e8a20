"""The background actors of docs/protocol.md against a real coordinator (real HTTP, real SQLite).

Each test starts an in-process coordinator with its background runner off and a
:class:`FakeClock`, sets tasks up through the REST API, moves the clock and calls one
actor's ``run_once`` pass by hand, then checks the task status the API serves. The last tests
turn the runner on and wait for it instead.
"""

from __future__ import annotations

from typing import Any

import slugid

from coordinator.domain import definitions, lifecycle
from coordinator.domain.records import TaskRecord, from_iso, record_from_definition, to_iso
from coordinator.resolvers import (
    claim_resolver,
    deadline_resolver,
    dependency_resolver,
    expiry_sweeper,
    hint_keeper,
)
from devharness.azurite import AzuriteProcess
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.coordinator import FakeClock, RunningCoordinator, StartCoordinator, runs

SECOND = 1_000
CLAIM_TIMEOUT = 1_200 * SECOND
"""The fixture default (``Config.claim_timeout_ms``)."""
DEADLINE_AFTER = 3_600 * SECOND
"""``task_definition`` puts the deadline one hour after ``created``."""


# --- helpers ----------------------------------------------------------------------------------


async def started(start: StartCoordinator, **config: Any) -> tuple[RunningCoordinator, FakeClock]:
    clock = FakeClock()
    running = await start(clock=clock, run_resolvers=False, **config)
    return running, clock


async def create(c: RunningCoordinator, clock: FakeClock, **overrides: Any) -> str:
    """Create a task whose ``created`` is the fake clock's now."""
    return await c.create(now_ms=clock.now, **overrides)


# --- claim resolver ---------------------------------------------------------------------------


async def test_an_expired_claim_becomes_claim_expired_and_a_retry_run_is_added(
    start_coordinator: StartCoordinator,
) -> None:
    c, clock = await started(start_coordinator)
    service = c.parts.service
    task_id = await create(c, clock)
    claimed = await c.claim(task_id, worker_id="worker-1")
    taken_until = from_iso(claimed["takenUntil"])
    assert taken_until == clock.now + CLAIM_TIMEOUT

    clock.now = taken_until - 1
    assert await claim_resolver.run_once(service) == 0
    assert runs(await c.status(task_id)) == [("running", "scheduled", None)]

    clock.now = taken_until
    assert await claim_resolver.run_once(service) == 1
    after = await c.status(task_id)
    assert after["state"] == "pending"
    assert after["retriesLeft"] == 4
    assert runs(after) == [
        ("exception", "scheduled", "claim-expired"),
        ("pending", "retry", None),
    ]
    expired, retry = after["runs"]
    assert expired["workerId"] == "worker-1"
    assert expired["resolved"] == to_iso(taken_until)
    assert retry["runId"] == 1
    assert retry["scheduled"] == to_iso(taken_until)

    # nothing left to do, and the retry run is the one workers may claim now
    assert await claim_resolver.run_once(service) == 0
    stale = await c.try_claim(task_id, 0, worker_id="w2")
    assert stale.status == 409, stale.body
    assert (await c.claim(task_id, run_id=1, worker_id="w2"))["runId"] == 1


async def test_claim_expiry_with_no_retries_left_leaves_the_task_in_exception(
    start_coordinator: StartCoordinator,
) -> None:
    c, clock = await started(start_coordinator)
    service = c.parts.service
    task_id = await create(c, clock, retries=0)
    dependent = await create(c, clock, dependencies=[task_id], requires="all-resolved")
    await c.claim(task_id)

    clock.advance(CLAIM_TIMEOUT / SECOND)
    assert await claim_resolver.run_once(service) == 1
    after = await c.status(task_id)
    assert after["state"] == "exception"
    assert after["retriesLeft"] == 0
    assert runs(after) == [("exception", "scheduled", "claim-expired")]
    assert await claim_resolver.run_once(service) == 0

    # the task resolved, so its all-resolved dependent starts
    await service.drain()
    assert runs(await c.status(dependent)) == [("pending", "scheduled", None)]


async def test_retries_are_used_up_one_claim_expiry_at_a_time(
    start_coordinator: StartCoordinator,
) -> None:
    c, clock = await started(start_coordinator)
    service = c.parts.service
    task_id = await create(c, clock, retries=1)

    await c.claim(task_id, run_id=0)
    clock.advance(CLAIM_TIMEOUT / SECOND)
    assert await claim_resolver.run_once(service) == 1
    middle = await c.status(task_id)
    assert middle["retriesLeft"] == 0
    assert runs(middle) == [("exception", "scheduled", "claim-expired"), ("pending", "retry", None)]

    await c.claim(task_id, run_id=1)
    clock.advance(CLAIM_TIMEOUT / SECOND)
    assert await claim_resolver.run_once(service) == 1
    final = await c.status(task_id)
    assert final["state"] == "exception"
    assert final["retriesLeft"] == 0
    assert runs(final) == [
        ("exception", "scheduled", "claim-expired"),
        ("exception", "retry", "claim-expired"),
    ]


async def test_a_reclaim_between_the_scan_and_the_transition_wins(
    start_coordinator: StartCoordinator,
) -> None:
    c, clock = await started(start_coordinator)
    service = c.parts.service
    task_id = await create(c, clock)
    seen = from_iso((await c.claim(task_id))["takenUntil"])

    clock.now = seen + 1
    # the resolver's scan observes the expired claim ...
    assert await c.parts.store.expired_claims(clock(), 500) == [(task_id, seen)]
    # ... then the worker's reclaim lands before the resolver's transition
    reclaimed = await c.call("POST", f"/task/{task_id}/runs/0/reclaim")
    assert reclaimed.status == 200, reclaimed.body
    renewed = from_iso(reclaimed.body["takenUntil"])
    assert renewed == clock.now + CLAIM_TIMEOUT

    def expire_what_the_scan_saw(record: TaskRecord, now: int) -> lifecycle.TransitionResult:
        # exactly what claim_resolver applies for a scanned (task_id, taken_until)
        return lifecycle.expire_claim(record, taken_until=seen, now=now, timing=service.timing)

    assert not (
        await service.apply(task_id, expire_what_the_scan_saw, action="claim-expired")
    ).changed
    # even once the renewed claim has run out too, the stale observation changes nothing
    clock.now = renewed
    assert not (
        await service.apply(task_id, expire_what_the_scan_saw, action="claim-expired")
    ).changed
    still = await c.status(task_id)
    assert runs(still) == [("running", "scheduled", None)]
    assert still["runs"][0]["takenUntil"] == to_iso(renewed)

    # a fresh pass observes the renewed takenUntil and acts on it
    assert await claim_resolver.run_once(service) == 1
    assert runs(await c.status(task_id)) == [
        ("exception", "scheduled", "claim-expired"),
        ("pending", "retry", None),
    ]


async def test_a_reclaim_before_the_pass_keeps_the_run(
    start_coordinator: StartCoordinator,
) -> None:
    c, clock = await started(start_coordinator)
    service = c.parts.service
    task_id = await create(c, clock)
    first = from_iso((await c.claim(task_id))["takenUntil"])

    clock.now = first - 1
    reclaimed = await c.call("POST", f"/task/{task_id}/runs/0/reclaim")
    assert reclaimed.status == 200, reclaimed.body
    clock.now = first + 1
    assert await claim_resolver.run_once(service) == 0
    assert runs(await c.status(task_id)) == [("running", "scheduled", None)]


# --- deadline resolver ------------------------------------------------------------------------


async def test_deadline_exceeded_for_unscheduled_pending_and_running_tasks(
    start_coordinator: StartCoordinator,
) -> None:
    delay = 10 * SECOND
    c, clock = await started(start_coordinator, deadline_delay_ms=delay)
    service = c.parts.service
    deadline = clock.now + DEADLINE_AFTER
    pending = await create(c, clock)
    unscheduled = await create(c, clock, dependencies=[pending])
    running = await create(c, clock)
    await c.claim(running, worker_id="runner")
    completed = await create(c, clock)
    await c.claim(completed)
    await c.report(completed, 0, "completed")
    completed_before = await c.status(completed)

    # the deadline has passed but not the delay: nothing yet
    clock.now = deadline + delay - 1
    assert await deadline_resolver.run_once(service, delay_ms=delay) == 0
    # the running task's claim ran out long ago, but past the deadline the claim resolver
    # leaves it to the deadline resolver
    assert await claim_resolver.run_once(service) == 0
    assert (await c.status(running))["state"] == "running"
    assert (await c.status(pending))["state"] == "pending"
    assert (await c.status(unscheduled))["state"] == "unscheduled"

    clock.now = deadline + delay
    assert await deadline_resolver.run_once(service, delay_ms=delay) == 3
    resolved_at = to_iso(clock.now)

    unscheduled_after = await c.status(unscheduled)
    assert unscheduled_after["state"] == "exception"
    assert runs(unscheduled_after) == [("exception", "exception", "deadline-exceeded")]
    assert unscheduled_after["runs"][0]["resolved"] == resolved_at

    pending_after = await c.status(pending)
    assert pending_after["state"] == "exception"
    assert runs(pending_after) == [("exception", "scheduled", "deadline-exceeded")]
    assert pending_after["runs"][0]["resolved"] == resolved_at

    running_after = await c.status(running)
    assert running_after["state"] == "exception"
    assert runs(running_after) == [("exception", "scheduled", "deadline-exceeded")]
    assert running_after["runs"][0]["workerId"] == "runner"
    assert running_after["runs"][0]["resolved"] == resolved_at
    # no retry past the deadline, whatever the budget
    assert running_after["retriesLeft"] == 5

    assert await c.status(completed) == completed_before
    assert await deadline_resolver.run_once(service, delay_ms=delay) == 0


async def test_the_deadline_resolver_honours_the_delay_it_is_given(
    start_coordinator: StartCoordinator,
) -> None:
    c, clock = await started(start_coordinator)
    service = c.parts.service
    deadline = clock.now + DEADLINE_AFTER
    task_id = await create(c, clock)

    clock.now = deadline
    assert await deadline_resolver.run_once(service, delay_ms=60 * SECOND) == 0
    clock.now = deadline + 60 * SECOND - 1
    assert await deadline_resolver.run_once(service, delay_ms=60 * SECOND) == 0
    assert (await c.status(task_id))["state"] == "pending"
    clock.now = deadline + 60 * SECOND
    assert await deadline_resolver.run_once(service, delay_ms=60 * SECOND) == 1
    assert runs(await c.status(task_id)) == [("exception", "scheduled", "deadline-exceeded")]


# --- dependency resolver ----------------------------------------------------------------------


async def _resolve_without_notifying(
    c: RunningCoordinator, task_id: str, *, state: str, now: int
) -> None:
    """Resolve the running run 0 the way a coordinator that died right after the write leaves
    it: the record stored with ``notify_dependents`` set, the in-line notification never run."""
    record = await c.parts.store.get(task_id)
    assert record is not None
    result = lifecycle.report(
        record, run_id=0, state=state, reason=state, now=now, timing=c.parts.service.timing
    )
    assert result.resolved and result.record.notify_dependents
    assert await c.parts.store.compare_and_set(result.record) is not None


async def test_a_lost_dependency_notification_is_finished_by_the_dependency_resolver(
    start_coordinator: StartCoordinator,
) -> None:
    c, clock = await started(start_coordinator)
    service = c.parts.service
    dependency = await create(c, clock)
    dependent = await create(c, clock, dependencies=[dependency])
    bystander = await create(c, clock, dependencies=[dependency, await create(c, clock)])
    await c.claim(dependency)

    await _resolve_without_notifying(c, dependency, state="completed", now=clock.now)
    assert (await c.status(dependency))["state"] == "completed"
    assert await c.parts.store.tasks_to_notify(100) == [dependency]
    assert (await c.status(dependent))["state"] == "unscheduled"

    assert await dependency_resolver.run_once(service) == 1
    after = await c.status(dependent)
    assert runs(after) == [("pending", "scheduled", None)]
    assert after["runs"][0]["scheduled"] == to_iso(clock.now)
    # a dependent still waiting for another dependency stays unscheduled
    assert (await c.status(bystander))["state"] == "unscheduled"
    assert await c.parts.store.tasks_to_notify(100) == []
    assert await dependency_resolver.run_once(service) == 0


async def test_the_dependency_resolver_clears_the_flag_of_a_dependency_that_failed(
    start_coordinator: StartCoordinator,
) -> None:
    c, clock = await started(start_coordinator)
    service = c.parts.service
    dependency = await create(c, clock)
    all_completed = await create(c, clock, dependencies=[dependency])
    all_resolved = await create(c, clock, dependencies=[dependency], requires="all-resolved")
    await c.claim(dependency)

    await _resolve_without_notifying(c, dependency, state="failed", now=clock.now)
    assert await c.parts.store.tasks_to_notify(100) == [dependency]

    assert await dependency_resolver.run_once(service) == 1
    assert (await c.status(all_completed))["state"] == "unscheduled"
    assert runs(await c.status(all_resolved)) == [("pending", "scheduled", None)]
    assert await c.parts.store.tasks_to_notify(100) == []


async def test_the_in_line_notification_schedules_dependents_and_clears_the_flag(
    start_coordinator: StartCoordinator,
) -> None:
    c, clock = await started(start_coordinator)
    service = c.parts.service
    dependency = await create(c, clock)
    dependent = await create(c, clock, dependencies=[dependency])
    await c.claim(dependency)

    await c.report(dependency, 0, "completed")
    await service.drain()
    assert runs(await c.status(dependent)) == [("pending", "scheduled", None)]
    assert await c.parts.store.tasks_to_notify(100) == []
    assert await dependency_resolver.run_once(service) == 0


# --- expiry sweeper ---------------------------------------------------------------------------


async def test_the_expiry_sweeper_deletes_expired_tasks_and_leaves_the_others(
    start_coordinator: StartCoordinator,
) -> None:
    c, clock = await started(start_coordinator)
    expires = clock.now + 2 * DEADLINE_AFTER
    short_lived = [await create(c, clock, expires=to_iso(expires)) for _ in range(3)]
    long_lived = await create(c, clock)
    dependent = await create(c, clock, dependencies=[short_lived[0]])

    clock.now = expires - 1
    assert await expiry_sweeper.run_once(c.parts.management) == 0
    for task_id in short_lived:
        assert (await c.call("GET", f"/task/{task_id}/status")).status == 200

    clock.now = expires
    assert await expiry_sweeper.run_once(c.parts.management, limit=2) == 2
    assert await expiry_sweeper.run_once(c.parts.management) == 1
    assert await expiry_sweeper.run_once(c.parts.management) == 0
    for task_id in short_lived:
        for path in (f"/task/{task_id}", f"/task/{task_id}/status"):
            gone = await c.call("GET", path)
            assert gone.status == 404, gone.body
            assert gone.body["code"] == "ResourceNotFound"
    assert (await c.status(long_lived))["state"] == "pending"
    assert (await c.status(dependent))["state"] == "unscheduled"
    # the deleted task's dependency edges went with it
    page = await c.parts.store.dependents(short_lived[0], limit=10, after=None)
    assert page.items == []


# --- hint keeper ------------------------------------------------------------------------------


async def test_the_hint_keeper_has_nothing_to_do_under_store_dispatch(
    start_coordinator: StartCoordinator,
) -> None:
    c, clock = await started(start_coordinator)  # no storage account: store dispatch
    service = c.parts.service
    task_id = await create(c, clock)
    clock.advance(60)
    # no hint is wanted for a pending run, so none is ever due, and the keeper is a no-op
    assert await c.parts.store.hints_due(clock.now, 10) == []
    assert await hint_keeper.run_once(service, grace_ms=0) == 0
    assert (await c.status(task_id))["state"] == "pending"


async def test_the_hint_keeper_puts_a_hint_the_coordinator_died_before_putting(
    start_coordinator: StartCoordinator, azurite: AzuriteProcess, azure_namespace: AzureNamespace
) -> None:
    grace = 30 * SECOND
    c, clock = await started(
        start_coordinator,
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
    )
    service = c.parts.service
    azure_queues = c.parts.azure_queues
    assert azure_queues is not None
    provisioner = azure_namespace.provisioner_id

    # createTask up to the store write, then a crash before the hint is put
    task_id = slugid.nice()
    body = task_definition(clock.now, provisionerId=provisioner)
    definition = definitions.normalise(
        task_id, body, now=clock.now, max_deadline_ms=service.max_deadline_ms
    )
    result = lifecycle.create(record_from_definition(task_id, definition), now=clock.now)
    assert await c.parts.store.insert(result.record) is not None
    created = clock.now

    clock.now = created + grace
    assert await hint_keeper.run_once(service, grace_ms=grace) == 0  # a put may be in flight
    clock.now = created + grace + 1
    assert await hint_keeper.run_once(service, grace_ms=grace) == 1
    assert await c.parts.store.hints_due(clock.now, 10) == []
    assert await hint_keeper.run_once(service, grace_ms=grace) == 0

    received = await azure_queues.receive(
        provisioner, "test-wt", max_messages=32, visibility_timeout=30
    )
    assert [(hint.task_id, hint.run_id) for hint in received] == [(task_id, 0)]
    # and the hint leads a worker to a claimable run
    assert (await c.claim(task_id))["runId"] == 0


# --- the background runner --------------------------------------------------------------------


async def test_the_background_resolvers_act_without_being_called(
    start_coordinator: StartCoordinator,
) -> None:
    clock = FakeClock()
    c = await start_coordinator(clock=clock, run_resolvers=True, resolver_interval_ms=50)
    claimed = await create(c, clock)
    await c.claim(claimed)
    late = await create(c, clock, deadline=to_iso(clock.now + 2 * CLAIM_TIMEOUT))
    dependency = await create(c, clock)
    dependent = await create(c, clock, dependencies=[dependency])
    await c.claim(dependency)
    await _resolve_without_notifying(c, dependency, state="completed", now=clock.now)

    async def dependent_started() -> bool:
        state: str = (await c.status(dependent))["state"]
        return state == "pending"

    await wait_until(dependent_started, within=5, what="the dependency resolver")

    clock.advance(CLAIM_TIMEOUT / SECOND)

    async def claim_expired() -> bool:
        return runs(await c.status(claimed)) == [
            ("exception", "scheduled", "claim-expired"),
            ("pending", "retry", None),
        ]

    await wait_until(claim_expired, within=5, what="the claim resolver")
    assert (await c.status(late))["state"] == "pending"

    clock.advance(2 * CLAIM_TIMEOUT / SECOND + 60)

    async def deadline_exceeded() -> bool:
        return runs(await c.status(late)) == [("exception", "scheduled", "deadline-exceeded")]

    await wait_until(deadline_exceeded, within=5, what="the deadline resolver")
