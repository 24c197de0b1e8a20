"""Crash safety: a real ``queue-coordinator serve`` process on a SQLite file is SIGKILLed and
started again on the same data directory (docs/protocol.md).

Every committed transition must survive the kill exactly as the API served it, and work that
fell due while no coordinator ran (expired claims) must be finished by the resolvers of the
restarted process.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from typing import Any

from coordinator.domain.records import from_iso
from coordinator.service.clock import wall_clock
from devharness.waiting import wait_until
from tests.fixtures.coordinator import CoordinatorProcess, RunningCoordinator, runs

MakeProcess = Callable[..., CoordinatorProcess]

RESOLVER_INTERVAL = 200
"""ms: the restarted coordinator's resolvers look often."""
CLAIM = {"workerGroup": "wg", "workerId": "w1"}


async def snapshot(c: RunningCoordinator, task_ids: list[str]) -> dict[str, Any]:
    """Everything the API says about each task: definition and full status."""
    shot: dict[str, Any] = {}
    for task_id in task_ids:
        definition = await c.ok("GET", f"/task/{task_id}")
        shot[task_id] = {"task": definition, "status": await c.status(task_id)}
    return shot


async def kill(process: CoordinatorProcess) -> None:
    assert process.process is not None
    await process.kill()
    assert process.process.returncode == -signal.SIGKILL


async def test_every_task_and_run_survives_a_sigkill(coordinator_process: MakeProcess) -> None:
    settings = {"resolver_interval_ms": RESOLVER_INTERVAL}
    first = coordinator_process(**settings)
    c = await first.start()

    pending = [await c.create() for _ in range(4)]
    running = [await c.create() for _ in range(3)]
    for i, task_id in enumerate(running):
        await c.claim(task_id, 0, worker_id=f"runner-{i}")
    await c.ok("POST", f"/task/{running[0]}/runs/0/reclaim")

    completed = await c.create()
    started_by_it = await c.create(dependencies=[completed])
    waiting_all_resolved = await c.create(dependencies=[completed], requires="all-resolved")
    await c.claim(completed, 0, worker_id="finisher")
    await c.report(completed, 0, "completed")

    blocker = await c.create()
    blocked = [await c.create(dependencies=[blocker, completed]) for _ in range(2)]

    failed = await c.create()
    await c.claim(failed, 0, worker_id="failer")
    await c.report(failed, 0, "failed")
    retried = await c.create()
    await c.claim(retried, 0, worker_id="shutdown")
    await c.report(retried, 0, "exception", "worker-shutdown")
    canceled = await c.create(dependencies=[blocker])
    await c.ok("POST", f"/task/{canceled}/cancel")

    async def dependents_started() -> bool:
        wanted = (started_by_it, waiting_all_resolved)
        return [(await c.status(t))["state"] for t in wanted] == ["pending"] * len(wanted)

    # the in-line dependency notification runs after the report's answer: let it finish, so
    # that the snapshot is a state at rest
    await wait_until(dependents_started, within=10, what="dependents of the completed task")

    everything = [
        *pending,
        *running,
        completed,
        started_by_it,
        waiting_all_resolved,
        blocker,
        *blocked,
        failed,
        retried,
        canceled,
    ]
    before = await snapshot(c, everything)
    states = {t: before[t]["status"]["state"] for t in everything}
    assert [states[t] for t in running] == ["running"] * 3
    assert states[completed] == "completed"
    assert states[failed] == "failed"
    assert [states[t] for t in blocked] == ["unscheduled"] * 2
    assert runs(before[retried]["status"]) == [
        ("exception", "scheduled", "worker-shutdown"),
        ("pending", "retry", None),
    ]
    assert runs(before[canceled]["status"]) == [("exception", "exception", "canceled")]

    await kill(first)
    second = coordinator_process(**settings)
    assert second.config.data_dir == first.config.data_dir
    assert second.config.store_url == first.config.store_url
    c = await second.start()

    assert await snapshot(c, everything) == before

    # and the restarted coordinator carries on from there
    await c.ok("POST", f"/task/{running[1]}/runs/0/reclaim")
    await c.report(running[2], 0, "completed")
    assert (await c.status(running[2]))["state"] == "completed"
    await c.claim(blocker, 0, worker_id="late")
    await c.report(blocker, 0, "completed")

    async def blocked_started() -> bool:
        return [(await c.status(t))["state"] for t in blocked] == ["pending"] * len(blocked)

    await wait_until(blocked_started, within=10, what="the blocked tasks to start")


async def test_claims_that_expire_while_the_coordinator_is_down_are_resolved_after_restart(
    coordinator_process: MakeProcess,
) -> None:
    # Claims of 5 s: the four claims, a snapshot and the kill must all come before the first
    # expires, which 2 s did not always leave a loaded machine.
    settings = {"resolver_interval_ms": RESOLVER_INTERVAL, "claim_timeout_ms": 5_000}
    first = coordinator_process(**settings)
    c = await first.start()

    retrying = [await c.create() for _ in range(3)]
    exhausted = await c.create(retries=0)
    dependent = await c.create(dependencies=[exhausted], requires="all-resolved")
    untouched = [await c.create() for _ in range(2)]
    taken_until = {}
    for i, task_id in enumerate([*retrying, exhausted]):
        taken_until[task_id] = (await c.claim(task_id, 0, worker_id=f"worker-{i}"))["takenUntil"]
    everything = [*retrying, exhausted, dependent, *untouched]
    before = await snapshot(c, everything)
    for task_id in taken_until:
        assert before[task_id]["status"]["state"] == "running"

    await kill(first)
    killed_at = wall_clock()
    assert killed_at < min(from_iso(t) for t in taken_until.values()), "claims expired too soon"
    latest = max(from_iso(t) for t in taken_until.values())

    async def claims_run_out() -> bool:
        return wall_clock() > latest

    await wait_until(claims_run_out, within=15, what="the claims to run out while down")
    second = coordinator_process(**settings)
    c = await second.start()

    async def resolved_by_the_resolvers() -> bool:
        states = [(await c.status(t))["state"] for t in [*retrying, exhausted, dependent]]
        return states == ["pending"] * len(retrying) + ["exception", "pending"]

    await wait_until(resolved_by_the_resolvers, within=10, what="the expired claims")

    after = await snapshot(c, everything)
    for task_id in retrying:
        now = after[task_id]["status"]
        assert runs(now) == [
            ("exception", "scheduled", "claim-expired"),
            ("pending", "retry", None),
        ]
        assert now["retriesLeft"] == before[task_id]["status"]["retriesLeft"] - 1
        expired = now["runs"][0]
        # run 0 is the run it was, resolved by the restarted process after the kill
        was = before[task_id]["status"]["runs"][0]
        changed = ("state", "reasonResolved", "resolved")
        assert {k: v for k, v in expired.items() if k not in changed} == {
            k: v for k, v in was.items() if k not in changed
        }
        assert expired["takenUntil"] == taken_until[task_id]
        assert from_iso(expired["resolved"]) >= killed_at
        assert after[task_id]["task"] == before[task_id]["task"]
    assert runs(after[exhausted]["status"]) == [("exception", "scheduled", "claim-expired")]
    assert after[exhausted]["status"]["retriesLeft"] == 0
    assert runs(after[dependent]["status"]) == [("pending", "scheduled", None)]
    for task_id in untouched:
        assert after[task_id] == before[task_id]


async def test_sigterm_under_load_stops_promptly_and_cleanly(
    postgres_schema_url: str, coordinator_process: MakeProcess
) -> None:
    """A replica on PostgreSQL given SIGTERM while creates, claims and reports are in flight
    exits 0 within its shutdown bounds (5 s for requests, 5 s for the pool), three times
    over; what it acknowledged stays (docs/operations.md, Upgrading)."""
    process = coordinator_process(
        store_url=postgres_schema_url, dispatch="store", resolver_interval_ms=RESOLVER_INTERVAL
    )
    acknowledged: list[str] = []
    for _ in range(3):
        c = await process.start()

        async def load(c: RunningCoordinator = c) -> None:
            while True:
                task_id = await c.create()
                acknowledged.append(task_id)
                await c.call("POST", f"/task/{task_id}/runs/0/claim", CLAIM)

        workers = [asyncio.create_task(load()) for _ in range(8)]
        await wait_until(lambda: len(acknowledged) >= 20, within=30, what="load")
        assert process.process is not None
        started = time.monotonic()
        process.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.process.wait(), timeout=15)
        stopped_within = time.monotonic() - started
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        assert (code, stopped_within < 12) == (0, True), stopped_within
    c = await process.start()
    for task_id in acknowledged:
        assert (await c.status(task_id))["state"] in ("pending", "running")
