"""End to end: real ``queue-worker`` processes against a real ``queue-coordinator serve``
process (SQLite, Hawk authentication on) and a real Azurite (issue 4), set up by the ``e2e``
fixture (tests/fixtures/workers.py), whose journaling handler records what each worker
process ran. Each worker-process test runs in both modes: polling Azure through signed URLs,
and ``--claim-work``. Poison messages and the DequeueCount warning concern only the Azure
mode.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import logging
import signal
import time
from datetime import datetime
from typing import Any

import pytest
import slugid

from coordinator.azure.hint_codec import encode_hint
from devharness.waiting import wait_until
from tests.fixtures.sdk import running
from tests.fixtures.workers import MODES, WORKER_GROUP, MakeE2E, started_by
from worker_sdk import TaskRun


def most_at_once(events: list[dict[str, Any]], worker: str) -> int:
    """The most runs ``worker`` had between start and end at the same time."""
    changes = sorted(
        (e["t"], 1 if e["event"] == "start" else -1)
        for e in events
        if e["worker"] == worker and e["event"] in ("start", "end")
    )
    running = most = 0
    for _, change in changes:
        running += change
        most = max(most, running)
    return most


def iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# --- many tasks, several workers ---------------------------------------------------------


@pytest.mark.parametrize("claim_work", MODES)
async def test_200_tasks_run_once_each_on_3_workers_highest_priority_first(
    e2e: MakeE2E, claim_work: bool
) -> None:
    s = await e2e(claim_work=claim_work)
    priorities = ("highest", "medium", "lowest")
    planned: dict[str, str] = {}
    limit = asyncio.Semaphore(8)

    async def create(n: int) -> None:
        async with limit:
            priority = priorities[n % 3]
            planned[await s.create(priority=priority, sleep=0.05 + n % 4 * 0.03)] = priority

    # Every task is pending before the first worker starts.
    await asyncio.gather(*(create(n) for n in range(200)))
    workers = [await s.start_worker(f"w{n}", capacity=4) for n in range(3)]

    async def all_ended() -> bool:
        return len(s.events("end")) >= len(planned)

    await s.eventually(all_ended, within=60, what="200 handlers ended")
    await s.resolved(*planned)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [await w.exited() for w in workers] == [0, 0, 0]

    journal = s.journal()
    starts = started_by(journal)
    twice = {run: by for run, by in starts.items() if len(by) > 1}
    assert not twice, f"runs started more than once: {twice}"
    assert set(starts) == {(task_id, 0) for task_id in planned}
    for task_id in planned:
        [run] = (await s.status(task_id))["runs"]
        assert (run["state"], run["reasonCreated"], run["reasonResolved"]) == (
            "completed",
            "scheduled",
            "completed",
        )
        assert run["workerGroup"] == WORKER_GROUP
        assert [run["workerId"]] == starts[(task_id, 0)]

    assert {e["worker"] for e in journal} == {"w0", "w1", "w2"}, "every worker took work"
    assert max(most_at_once(journal, w.name) for w in workers) <= 4, "capacity is respected"
    start_times = collections.defaultdict(list)
    for event in journal:
        if event["event"] == "start":
            start_times[planned[event["taskId"]]].append(event["t"])
    assert max(start_times["highest"]) < min(start_times["lowest"]), (
        "a lowest-priority task started while a highest-priority one was still pending"
    )


@pytest.mark.parametrize("claim_work", MODES)
async def test_each_way_a_handler_ends_is_reported(e2e: MakeE2E, claim_work: bool) -> None:
    s = await e2e(claim_work=claim_work)
    expected = {
        "complete": ("completed", "completed"),
        "fail": ("failed", "failed"),
        "malformed-payload": ("exception", "malformed-payload"),
        "resource-unavailable": ("exception", "resource-unavailable"),
        "internal-error": ("exception", "internal-error"),
    }
    tasks = {outcome: await s.create(outcome=outcome) for outcome in expected}
    worker = await s.start_worker("w", capacity=len(tasks))
    await s.resolved(*tasks.values())
    worker.signal(signal.SIGTERM)
    assert await worker.exited() == 0
    ended = {}
    for outcome, task_id in tasks.items():
        [run] = (await s.status(task_id))["runs"]
        ended[outcome] = (run["state"], run["reasonResolved"])
    assert ended == expected, "one run each: none of these outcomes is retried"


# --- claims -------------------------------------------------------------------------------


@pytest.mark.parametrize("claim_work", MODES)
async def test_a_handler_outliving_the_claim_timeout_completes_thanks_to_reclaims(
    e2e: MakeE2E, claim_work: bool
) -> None:
    s = await e2e(claim_work=claim_work, claim_timeout_s=3)
    task_id = await s.create(sleep=5)
    worker = await s.start_worker("w")
    await s.resolved(task_id)

    assert await s.runs(task_id) == [("completed", "scheduled", "completed", "w")]
    start = await s.journaled("start", task_id)
    end = await s.journaled("end", task_id)
    assert end["t"] - start["t"] >= 5
    assert worker.log().count(f"reclaimed taskId={task_id} runId=0") >= 2
    worker.signal(signal.SIGTERM)
    assert await worker.exited() == 0


@pytest.mark.parametrize("claim_work", MODES)
async def test_a_sigkilled_worker_s_run_expires_and_another_worker_completes_the_retry(
    e2e: MakeE2E, claim_work: bool
) -> None:
    s = await e2e(claim_work=claim_work, claim_timeout_s=3)
    task_id = await s.create(sleep=[60, 0.1])
    doomed = await s.start_worker("doomed")
    await s.journaled("start", task_id)
    doomed.signal(signal.SIGKILL)
    assert await doomed.exited() == -signal.SIGKILL
    rescuer = await s.start_worker("rescuer")

    await s.journaled("end", task_id, run_id=1)
    await s.resolved(task_id)
    status = await s.status(task_id)
    assert await s.runs(task_id) == [
        ("exception", "scheduled", "claim-expired", "doomed"),
        ("completed", "retry", "completed", "rescuer"),
    ]
    expired = status["runs"][0]
    assert iso(expired["resolved"]) >= iso(expired["takenUntil"])
    assert started_by(s.journal()) == {(task_id, 0): ["doomed"], (task_id, 1): ["rescuer"]}
    assert s.events("cancelled") == [], "the killed handler had no chance to see anything"
    rescuer.signal(signal.SIGTERM)
    assert await rescuer.exited() == 0


@pytest.mark.slow(seconds=35, waits=True)
async def test_a_tasks_short_claim_timeout_retries_it_soon_after_its_worker_is_killed(
    e2e: MakeE2E,
) -> None:
    s = await e2e(claim_work=False)  # the coordinator's claim timeout: 20 minutes
    task_id = await s.create(sleep=[60, 0.1], claim_timeout_s=30)
    doomed = await s.start_worker("doomed")
    await s.journaled("start", task_id)
    doomed.signal(signal.SIGKILL)
    assert await doomed.exited() == -signal.SIGKILL
    await s.start_worker("rescuer")

    await s.journaled("end", task_id, run_id=1, within=60)
    await s.resolved(task_id)  # the report follows the handler's end
    assert await s.runs(task_id) == [
        ("exception", "scheduled", "claim-expired", "doomed"),
        ("completed", "retry", "completed", "rescuer"),
    ]
    expired = (await s.status(task_id))["runs"][0]
    held = iso(expired["resolved"]) - iso(expired["started"])
    assert 30 <= held.total_seconds() < 40, held


@pytest.mark.parametrize("claim_work", MODES)
async def test_sigterm_lets_short_handlers_finish_and_hands_long_ones_to_another_worker(
    e2e: MakeE2E, claim_work: bool
) -> None:
    s = await e2e(claim_work=claim_work)
    grace = 3.0
    short = await s.create(sleep=1)  # finishes within the grace period
    long = await s.create(sleep=[60, 0.1])  # does not
    leaving = await s.start_worker("leaving", capacity=2, grace_period=grace)
    await s.journaled("start", short)
    await s.journaled("start", long)
    leaving.signal(signal.SIGTERM)
    sigterm_at = time.time()
    other = await s.start_worker("other")

    assert await leaving.exited() == 0
    await s.resolved(short, long)
    assert await s.runs(short) == [("completed", "scheduled", "completed", "leaving")]
    await s.journaled("end", long, run_id=1)
    await s.resolved(long)
    assert await s.runs(long) == [
        ("exception", "scheduled", "worker-shutdown", "leaving"),
        ("completed", "retry", "completed", "other"),
    ]
    finished = await s.journaled("end", short)
    cancelled = await s.journaled("cancelled", long)
    assert finished["t"] < sigterm_at + grace <= cancelled["t"] + 0.5
    assert f"run cancelled by shutdown taskId={long} runId=0" in leaving.log()
    assert started_by(s.journal()) == {
        (short, 0): ["leaving"],
        (long, 0): ["leaving"],
        (long, 1): ["other"],
    }
    other.signal(signal.SIGTERM)
    assert await other.exited() == 0


@pytest.mark.parametrize("claim_work", MODES)
async def test_cancel_task_stops_the_running_handler_at_once(
    e2e: MakeE2E, claim_work: bool
) -> None:
    """Long before any reclaim (20 min claims): the worker's watchRuns hears the cancel."""
    s = await e2e(claim_work=claim_work)
    task_id = await s.create(sleep=60)
    worker = await s.start_worker("w")
    await s.journaled("start", task_id)
    await s.queue.cancelTask(task_id)
    cancelled_at = time.time()

    cancelled = await s.journaled("cancelled", task_id, within=10)
    assert cancelled["t"] - cancelled_at < 2.0
    await s.logged(worker, f"run stopped, task cancelled taskId={task_id} runId=0")
    worker.signal(signal.SIGTERM)
    assert await worker.exited() == 0
    reports = [
        line
        for line in worker.log().splitlines()
        if f"taskId={task_id}" in line and ("report" in line or "run resolved" in line)
    ]
    assert reports == [], "nothing is reported for a cancelled run"
    assert "reclaimed" not in worker.log()
    assert await s.runs(task_id) == [("exception", "scheduled", "canceled", "w")]
    assert s.events("end", task_id) == []


# --- Azure only ---------------------------------------------------------------------------


async def test_poison_messages_are_deleted_and_the_worker_keeps_working(e2e: MakeE2E) -> None:
    s = await e2e(claim_work=False)
    worker = await s.start_worker("w")
    # pollTaskUrls creates the worker type's queues.
    await s.logged(worker, "poll urls refreshed")
    unknown_task = slugid.nice()
    async with s.azure_queue("highest") as queue:
        await queue.send_message("not base64 at all!")
        await queue.send_message(base64.b64encode(b"{not json").decode())
        await queue.send_message(encode_hint(task_id=unknown_task, run_id=0, hint_id="junk"))

    await s.logged(worker, "poison hint deleted", count=2)
    await s.logged(worker, f"hint not claimable taskId={unknown_task} runId=0")
    assert "status=404" in worker.log()
    task_id = await s.create(priority="lowest")
    await s.resolved(task_id)
    assert await s.runs(task_id) == [("completed", "scheduled", "completed", "w")]

    async def queues_empty() -> bool:
        return [await s.message_count(p) for p in ("highest", "lowest")] == [0, 0]

    await s.eventually(queues_empty, within=10, what="empty queues")
    assert worker.process.returncode is None
    worker.signal(signal.SIGTERM)
    assert await worker.exited() == 0


async def test_a_hint_dequeued_too_often_is_logged_as_a_warning(
    e2e: MakeE2E, caplog: pytest.LogCaptureFixture
) -> None:
    s = await e2e(claim_work=False)
    overdue = await s.create(priority="high")
    fresh = await s.create(priority="lowest")

    # Dequeue the hint twice behind the worker's back, making it visible again each time.
    async with s.azure_queue("high") as queue:
        for _ in range(2):
            message = None

            async def received() -> bool:
                nonlocal message
                message = await queue.receive_message(visibility_timeout=30)
                return message is not None

            await wait_until(received, within=10, what="the hint")
            assert message is not None
            await queue.update_message(message, visibility_timeout=0)

    ran: list[str] = []

    async def handle(run: TaskRun) -> None:
        ran.append(run.task_id)

    worker = s.worker(handle, dequeue_warning=1)
    with caplog.at_level(logging.WARNING, logger="worker_sdk.poller"):
        async with running(worker):
            await s.resolved(overdue, fresh)

    assert sorted(ran) == sorted([overdue, fresh])
    warnings = [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == "worker_sdk.poller" and r.getMessage().startswith("hint dequeued too often")
    ]
    assert warnings == [
        (
            logging.WARNING,
            f"hint dequeued too often taskId={overdue} runId=0 queue={s.queue_name('high')}"
            " dequeueCount=3",
        )
    ]
