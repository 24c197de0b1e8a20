"""The worker SDK against the real coordinator (in process) on a real Azurite, with Hawk
authentication on: tasks are created with the official ``taskcluster`` client and the root
client's credentials, the worker signs with the same, then with each run's temporary ones.

What the coordinator test double (tests/fixtures/coordinator_double.py) fakes is checked here
for real: priority order, outcomes, claimWork, reclaims with fresh temporary credentials, a task
canceled mid-run, and shutdown handing runs back for a retry.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from typing import Any

import aiohttp
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devharness.ports import free_port
from devharness.waiting import wait_until
from tests.fixtures.sdk import MakeSetup, Overlap, last_run, run_until, running
from worker_sdk import MalformedPayload, TaskRun


async def test_tasks_run_highest_priority_first_and_outcomes_are_reported(
    setup: MakeSetup,
) -> None:
    s = await setup()
    tasks = {
        "ok": await s.create(priority="lowest", payload={"do": "ok"}),
        "boom": await s.create(priority="medium", payload={"do": "boom"}),
        "malformed": await s.create(priority="high", payload={"do": "malformed"}),
        "first": await s.create(priority="highest", payload={"do": "ok"}),
    }
    order: list[str] = []

    async def handle(run: TaskRun) -> None:
        order.append(run.task_id)
        if run.payload["do"] == "boom":
            raise RuntimeError("boom")
        if run.payload["do"] == "malformed":
            raise MalformedPayload("bad payload")

    await run_until(s.worker(handle, capacity=1), lambda: s.resolved(*tasks.values()))
    names = {task_id: name for name, task_id in tasks.items()}
    assert [names[task_id] for task_id in order] == ["first", "malformed", "boom", "ok"]
    outcomes = {name: last_run(await s.status(task_id)) for name, task_id in tasks.items()}
    assert outcomes == {
        "ok": ("completed", "completed"),
        "first": ("completed", "completed"),
        "boom": ("failed", "failed"),
        "malformed": ("exception", "malformed-payload"),
    }


@pytest.mark.parametrize("claim_work", [False, True], ids=["azure", "claimWork"])
async def test_one_worker_serves_two_task_queues_by_priority(
    setup: MakeSetup, claim_work: bool
) -> None:
    """Polling Azure, the priority order holds across the task queues; with claimWork the
    coordinator keeps it within each task queue."""
    s = await setup()
    other = "sdk-wt-other"
    first = await s.create(priority="highest", worker_type=other)
    second = await s.create(priority="high")
    third = await s.create(priority="low", worker_type=other)
    fourth = await s.create(priority="lowest")
    order: list[str] = []

    async def handle(run: TaskRun) -> None:
        order.append(run.task_id)

    worker = s.worker(
        handle, capacity=1, task_queues=[f"{s.provisioner_id}/{other}"], claim_work=claim_work
    )
    await run_until(worker, lambda: s.resolved(first, second, third, fourth))
    if claim_work:
        assert [t for t in order if t in (first, third)] == [first, third]
        assert [t for t in order if t in (second, fourth)] == [second, fourth]
    else:
        assert order == [first, second, third, fourth]
    statuses = [await s.status(t) for t in (first, second, third, fourth)]
    assert [last_run(status) for status in statuses] == [("completed", "completed")] * 4


async def test_claim_work_mode_runs_tasks_without_polling_azure(
    setup: MakeSetup,
) -> None:
    s = await setup()
    task_ids = [await s.create(priority="medium") for _ in range(4)]
    handle = Overlap(lambda: asyncio.sleep(0.3))
    worker = s.worker(handle, capacity=3, claim_work=True)
    stopping = await run_until(worker, lambda: s.resolved(*task_ids))
    assert [last_run(await s.status(t)) for t in task_ids] == [("completed", "completed")] * 4
    assert handle.most == 3
    assert stopping < 3, "the worker hangs up on its ~20 s long poll instead of waiting"


async def test_a_worker_left_to_choose_claims_through_claim_work_under_store_dispatch(
    setup: MakeSetup, caplog: pytest.LogCaptureFixture
) -> None:
    s = await setup(dispatch="store")  # a storage account, and dispatch from the store all the same
    low, high = await s.create(priority="lowest"), await s.create(priority="highest")
    order: list[str] = []

    async def handle(run: TaskRun) -> None:
        order.append(run.task_id)

    with caplog.at_level(logging.INFO, logger="worker_sdk.worker"):
        await run_until(s.worker(handle, capacity=1), lambda: s.resolved(low, high))
    assert order == [high, low]
    assert "the coordinator dispatches from its store" in caplog.text
    assert [last_run(await s.status(t)) for t in (low, high)] == [("completed", "completed")] * 2


async def test_weighted_polling_reaches_the_store_dispatch_claims(setup: MakeSetup) -> None:
    """``--polling weighted`` sends its weights with each claimWork: a lowest priority weighted
    far above the rest comes first, where strict priority would run it last."""
    s = await setup(dispatch="store")
    high = [await s.create(priority="highest") for _ in range(3)]
    low = [await s.create(priority="lowest") for _ in range(3)]
    order: list[str] = []

    async def handle(run: TaskRun) -> None:
        order.append(run.task_id)

    # 1e9 against 64: another priority first once in about 15 million draws
    worker = s.worker(handle, capacity=1, polling="weighted", weights={"lowest": 1e9})
    await run_until(worker, lambda: s.resolved(*high, *low))
    assert order == [*low, *high]


async def test_one_worker_shares_its_capacity_between_two_busy_task_queues_under_store_dispatch(
    setup: MakeSetup,
) -> None:
    s = await setup(dispatch="store")
    other = "sdk-wt-other"
    mine = [await s.create(priority="medium") for _ in range(6)]
    others = [await s.create(priority="medium", worker_type=other) for _ in range(6)]
    order: list[str] = []

    async def handle(run: TaskRun) -> None:
        order.append(run.task_id)

    worker = s.worker(handle, capacity=1, task_queues=[f"{s.provisioner_id}/{other}"])
    await run_until(worker, lambda: s.resolved(*mine, *others))
    # one long poll at a time, taking turns: neither task queue waits for the other to empty
    assert [t in others for t in order[:6]] == [False, True] * 3
    assert sorted(order) == sorted([*mine, *others])


async def test_reclaims_keep_a_run_alive_with_fresh_temporary_credentials(
    setup: MakeSetup,
) -> None:
    s = await setup(claim_timeout_ms=3_000)
    task_id = await s.create()
    seen: list[tuple[Any, str]] = []

    async def handle(run: TaskRun) -> None:
        seen.append((run.taken_until, run.credentials.access_token))

        async def renewed_twice() -> bool:
            if run.credentials.access_token != seen[-1][1]:
                seen.append((run.taken_until, run.credentials.access_token))
            return len(seen) >= 3

        await wait_until(renewed_twice, what="two reclaims")

    await run_until(s.worker(handle), lambda: s.resolved(task_id))
    assert last_run(await s.status(task_id)) == ("completed", "completed")
    assert seen[0][0] < seen[1][0] < seen[2][0], "takenUntil moves on with each reclaim"


async def test_a_task_canceled_mid_run_cancels_the_handler_and_nothing_is_reported(
    setup: MakeSetup,
) -> None:
    s = await setup(claim_timeout_ms=3_000)
    task_id = await s.create()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handle(run: TaskRun) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def cancel_then_see_handler_stop() -> None:
        await asyncio.wait_for(started.wait(), timeout=20)
        await s.queue.cancelTask(task_id)
        # The worker hears it (watchRuns); it must stop the handler and report nothing.
        await asyncio.wait_for(cancelled.wait(), timeout=20)

    await run_until(s.worker(handle), cancel_then_see_handler_stop)
    status = await s.status(task_id)
    assert [(r["state"], r["reasonResolved"]) for r in status["runs"]] == [
        ("exception", "canceled")
    ]


async def test_shutdown_hands_unfinished_runs_back_for_a_retry(
    setup: MakeSetup,
) -> None:
    s = await setup()
    task_id = await s.create()
    started = asyncio.Event()

    async def handle(run: TaskRun) -> None:
        started.set()
        await asyncio.Event().wait()

    async def started_running() -> None:
        await asyncio.wait_for(started.wait(), timeout=20)

    await run_until(s.worker(handle, grace_period=0.2), started_running)
    runs = (await s.status(task_id))["runs"]
    assert [(r["state"], r.get("reasonResolved"), r["reasonCreated"]) for r in runs] == [
        ("exception", "worker-shutdown", "scheduled"),
        ("pending", None, "retry"),
    ]


async def test_worker_metrics_on_its_metrics_port(setup: MakeSetup) -> None:
    s = await setup()
    for do in ("ok", "boom", "malformed"):
        await s.create(payload={"do": do})

    async def handle(run: TaskRun) -> None:
        if run.payload["do"] == "boom":
            raise RuntimeError("boom")
        if run.payload["do"] == "malformed":
            raise MalformedPayload("bad payload")

    port = free_port()
    samples: dict[str, float] = {}

    async def three_reported() -> bool:
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{port}/metrics") as response,
            ):
                text = await response.text()
        except aiohttp.ClientConnectionError:  # the worker has not started serving yet
            return False
        samples.clear()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}"] = sample.value
        # counted after each report is accepted, so after the duration
        return sum(v for k, v in samples.items() if k.startswith("worker_tasks_total")) == 3

    async def done() -> None:
        await wait_until(three_reported, what="three runs in the worker's metrics")
        listening = {
            connection.laddr.ip
            for connection in psutil.Process().net_connections("tcp")
            if connection.status == psutil.CONN_LISTEN and connection.laddr.port == port
        }
        assert listening == {"127.0.0.1"}  # this machine only: no metrics_host was given

    await run_until(s.worker(handle, capacity=3, metrics_port=port), done)
    assert samples["worker_tasks_total{outcome=completed}"] == 1
    assert samples["worker_tasks_total{outcome=failed}"] == 1
    assert samples["worker_tasks_total{outcome=exception}"] == 1
    assert samples["worker_task_duration_seconds_count{}"] == 3
    assert samples["worker_running_tasks{}"] == 0
    assert samples["worker_hint_dequeue_warnings_total{}"] == 0
    assert samples["worker_hint_delete_failures_total{}"] == 0


async def test_an_idle_worker_backs_off_to_its_idle_rate_and_work_ends_the_backoff(
    setup: MakeSetup, caplog: pytest.LogCaptureFixture
) -> None:
    """Seven Azure queues a pass; the pause doubles from 20 ms up to 7 / 20 = 0.35 s, where
    the worker makes 20 gets a second (without the backoff, two polls in flight every 20 ms
    would make about 700)."""
    caplog.set_level(logging.DEBUG, logger="worker_sdk.poller")
    s = await setup()

    async def handle(run: TaskRun) -> None:
        pass

    worker = s.worker(handle, capacity=4, idle_delay=0.02, idle_rate=20.0)

    def gets() -> float:
        value = worker.metrics.registry.get_sample_value(
            "worker_azure_requests_total", {"operation": "get"}
        )
        return value or 0.0

    def empty_passes() -> list[int]:
        found = (re.search(r"emptyPasses=(\d+)", r.getMessage()) for r in caplog.records)
        return [int(match.group(1)) for match in found if match]

    async with running(worker):
        await wait_until(lambda: max(empty_passes(), default=0) >= 6, what="the longest pause")
        # a rate needs a window of time: about eight passes at the longest pause
        before, started = gets(), time.monotonic()
        await asyncio.sleep(3.0)
        rate = (gets() - before) / (time.monotonic() - started)
        assert 0 < rate <= 20.0 * 1.5, f"{rate:.1f} gets a second"
        caplog.clear()
        task_id = await s.create()
        await s.resolved(task_id)
        # A pass that began before the hint arrived may still log the old count first; after
        # the work, the count starts again at 1 (it would go on growing were the backoff kept).
        await wait_until(lambda: 1 in empty_passes(), what="the work ending the backoff")


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_handler_past_the_workers_max_run_time_is_stopped_and_its_run_fails(
    setup: MakeSetup, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """An async handler is cancelled, a sync one abandoned in its thread; either run is
    failed and not retried, even with --retry-failures."""
    s = await setup()
    task_id = await s.create()
    stopped = asyncio.Event()
    release = threading.Event()

    async def async_handler(run: TaskRun) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.set()
            raise

    def sync_handler(run: TaskRun) -> None:
        release.wait(30)

    handler = async_handler if kind == "async" else sync_handler
    worker = s.worker(handler, max_run_time=0.5, retry_failures=True)
    try:
        with caplog.at_level(logging.ERROR, logger="worker_sdk.serving"):
            await run_until(worker, lambda: s.resolved(task_id))
    finally:
        release.set()
    status = await s.status(task_id)
    assert (status["state"], len(status["runs"])) == ("failed", 1), status
    assert last_run(status) == ("failed", "failed")
    assert stopped.is_set() is (kind == "async")
    how = "cancelled" if kind == "async" else "abandoned in its thread"
    assert f"max_run_time of 0.5 s exceeded: the handler was {how}" in caplog.text
