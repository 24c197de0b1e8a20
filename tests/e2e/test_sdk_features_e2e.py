"""End to end, the worker features beyond one worker type: weighted polling, several task
queues, retries asked for by the handler, process isolation, ``--processes``, and how a
worker meets a coordinator that refuses it or does not answer.

Real ``queue-worker`` processes (and, where a module constant must be shortened, an
in-process :class:`~worker_sdk.Worker`) against a real ``queue-coordinator serve`` process
with Hawk authentication on and a real Azurite, set up by the ``e2e`` fixture
(tests/fixtures/workers.py), whose journaling handler (tests/fixtures/e2e_handlers.py)
records what ran.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal

import pytest
import slugid

from coordinator.azure.hint_codec import encode_hint
from coordinator.service.clients_file import add_client
from tests.fixtures.sdk import running
from tests.fixtures.workers import E2E, MODES, WORKER_GROUP, WORKER_TYPE, MakeE2E
from worker_sdk import TaskRun, azure_poller

OTHER_WORKER_TYPE = "e2e-other"


def worker_client(
    s: E2E, client_id: str, worker_types: tuple[str, ...], *, may_claim: bool = True
) -> dict[str, str]:
    """A new client with the worker scopes of ``worker_types`` (without the claim scopes
    unless ``may_claim``); the coordinator picks it up from its clients file."""
    task_queues = [f"{s.provisioner_id}/{worker_type}" for worker_type in worker_types]
    scopes = [f"queue:poll-task-urls:{queue}" for queue in task_queues]
    if may_claim:
        scopes += [
            f"queue:claim-{how}:{queue}" for queue in task_queues for how in ("task", "work")
        ]
    scopes.append(f"queue:worker-id:{WORKER_GROUP}/*")
    credentials = add_client(s.coordinator.config.clients_file, client_id, scopes=scopes)
    return {"clientId": credentials.client_id, "accessToken": credentials.access_token}


def ended_as(runs: list[tuple[str, str, str | None, str | None]]) -> list[tuple[str, ...]]:
    """(reasonCreated, state/reasonResolved) of each run."""
    return [(created, f"{state}/{resolved}") for state, created, resolved, _ in runs]


# --- A: weighted polling, several task queues ---------------------------------------------


async def test_weighted_polling_completes_lowest_priority_tasks_that_strict_polling_starves(
    e2e: MakeE2E,
) -> None:
    s = await e2e(claim_work=False)
    lowest = [await s.create(priority="lowest") for _ in range(3)]
    # A backlog, not a producer racing the workers: the higher queues stay full for the whole
    # test (strict takes 40 highest; weighted needs about 21 passes for three lowest, taking
    # about 12 highest meanwhile), so the lowest tasks go through without the others running
    # dry. A producer topping up from the start events lagged behind a loaded machine.
    higher = {
        priority: list(
            await asyncio.gather(*(s.create(priority=priority, sleep=0.02) for _ in range(count)))
        )
        for priority, count in (("highest", 120), ("medium", 60))
    }
    # the strict walk of every queue on every pass: the default empty-queue skip would
    # let a lowest task in whenever a higher queue answered empty once (≤ 1 s inversion);
    # one get at a time, as a worker that polls slowly
    one_get = ["--polls-in-flight", "1"]
    strict = await s.start_worker("strict", capacity=2, flags=["--empty-queue-skip", "0", *one_get])

    async def forty_ended() -> bool:
        return len(s.events("end")) >= 40

    await s.eventually(forty_ended, what="40 runs under strict polling")
    strict.signal(signal.SIGTERM)
    assert await strict.exited() == 0
    assert {e["taskId"] for e in s.events("start")}.isdisjoint(lowest), "strict starves"

    weights = ["--weight", "highest=4", "--weight", "medium=2", "--weight", "lowest=1"]
    weighted = await s.start_worker(
        "weighted", capacity=2, flags=["--polling", "weighted", *weights, *one_get]
    )
    await s.resolved(*lowest, within=40)

    async def still_pending(task_ids: list[str]) -> bool:
        for task_id in reversed(task_ids):
            if (await s.status(task_id))["state"] == "pending":
                return True
        return False

    pending = [priority for priority, task_ids in higher.items() if await still_pending(task_ids)]
    assert pending == ["highest", "medium"], "the higher priorities were still full"
    for task_id in lowest:
        assert await s.runs(task_id) == [("completed", "scheduled", "completed", "weighted")]
    weighted.signal(signal.SIGTERM)
    assert await weighted.exited() == 0


@pytest.mark.parametrize("claim_work", MODES)
async def test_one_worker_drains_two_task_queues(e2e: MakeE2E, claim_work: bool) -> None:
    s = await e2e(claim_work=claim_work)
    credentials = worker_client(s, "e2e-two-queues", (WORKER_TYPE, OTHER_WORKER_TYPE))
    tasks = {
        await s.create(worker_type=worker_type, priority=priority): worker_type
        for worker_type in (WORKER_TYPE, OTHER_WORKER_TYPE)
        for priority in ("highest", "medium", "lowest")
        for _ in range(4)
    }
    worker = await s.start_worker(
        "both",
        capacity=4,
        flags=["--task-queue", f"{s.provisioner_id}/{OTHER_WORKER_TYPE}"],
        credentials=credentials,
    )
    await s.resolved(*tasks)
    for task_id, worker_type in tasks.items():
        status = await s.status(task_id)
        assert status["workerType"] == worker_type
        assert await s.runs(task_id) == [("completed", "scheduled", "completed", "both")]
    assert (
        f"taskQueues={s.provisioner_id}/{WORKER_TYPE},{s.provisioner_id}/{OTHER_WORKER_TYPE}"
        in (worker.log())
    )
    worker.signal(signal.SIGTERM)
    assert await worker.exited() == 0


# --- B: retries asked for by the handler --------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "flags"),
    [pytest.param("retry", [], id="RetryTask"), pytest.param("fail", ["--retry-failures"])],
)
async def test_retries_run_up_to_the_task_s_retries_then_the_task_fails(
    e2e: MakeE2E, outcome: str, flags: list[str]
) -> None:
    s = await e2e(claim_work=False)
    task_id = await s.create(retries=2, outcome=outcome)
    worker = await s.start_worker("w", flags=flags)
    await s.journaled("end", task_id, run_id=2)
    await s.resolved(task_id)
    assert ended_as(await s.runs(task_id)) == [
        ("scheduled", "exception/intermittent-task"),
        ("task-retry", "exception/intermittent-task"),
        ("task-retry", "failed/failed"),
    ]
    assert (await s.status(task_id))["retriesLeft"] == 0
    worker.signal(signal.SIGTERM)
    assert await worker.exited() == 0


# --- C: process isolation, several worker processes ---------------------------------------


async def test_a_handler_that_ends_its_process_fails_only_its_run_under_process_isolation(
    e2e: MakeE2E,
) -> None:
    s = await e2e(claim_work=False)
    doomed = await s.create(priority="high", outcome="exit")
    others = [await s.create(sleep=0.2) for _ in range(5)]
    worker = await s.start_worker("isolated", capacity=3, flags=["--isolation", "process"])
    await s.resolved(doomed, *others)

    assert await s.runs(doomed) == [("exception", "scheduled", "internal-error", "isolated")]
    for task_id in others:
        assert await s.runs(task_id) == [("completed", "scheduled", "completed", "isolated")]
    assert f"handler process died taskId={doomed} runId=0 exitCode=1" in worker.log()
    pids = {event["taskId"]: event["pid"] for event in s.events("start")}
    assert len(pids) == 6 and worker.process.pid not in pids.values()
    # a pool of three, and one process in place of the one that died: the others reused them
    assert len(set(pids.values())) <= 4 and pids[doomed] not in {pids[t] for t in others}
    worker.signal(signal.SIGTERM)
    assert await worker.exited() == 0


async def test_a_supervisor_restarts_a_killed_worker_process_and_drains_on_sigterm(
    e2e: MakeE2E,
) -> None:
    s = await e2e(claim_work=False)
    supervisor = await s.start_worker("sup", grace_period=1, flags=["--processes", "2"])

    def children() -> dict[int, int]:
        """slot -> process id of each child the supervisor started, the latest per slot."""
        started = re.findall(r"worker process started slot=(\d+) pid=(\d+)", supervisor.log())
        return {int(slot): int(pid) for slot, pid in started}

    await s.logged(supervisor, "worker started", count=2)
    first = children()
    assert sorted(first) == [0, 1]
    assert "workerId=sup-0" in supervisor.log() and "workerId=sup-1" in supervisor.log()
    os.kill(first[0], signal.SIGKILL)
    await s.logged(supervisor, f"exited unexpectedly slot=0 pid={first[0]} status=-9")
    await s.logged(supervisor, "worker started", count=3)
    restarted = children()
    assert restarted[0] != first[0] and restarted[1] == first[1]

    short = [await s.create(sleep=0.1) for _ in range(6)]
    long = await s.create(priority="high", sleep=[60, 0.1])
    await s.resolved(*short)
    await s.journaled("start", long)
    supervisor.signal(signal.SIGTERM)
    assert await supervisor.exited() == 0
    for pid in restarted.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert {(await s.runs(t))[0][3] for t in short} <= {"sup-0", "sup-1"}
    [shut_down, retry] = await s.runs(long)
    assert shut_down[:3] == ("exception", "scheduled", "worker-shutdown")
    assert retry[:2] == ("pending", "retry")


# --- D: a refusing or silent coordinator --------------------------------------------------


async def test_a_worker_whose_claims_get_403_leaves_the_hints_and_exits_non_zero(
    e2e: MakeE2E,
) -> None:
    # a short poll visibility: the hints the refused worker took come back in seconds
    s = await e2e(claim_work=False, poll_visibility_s=3)
    credentials = worker_client(s, "e2e-no-claims", (WORKER_TYPE,), may_claim=False)
    task_ids = [await s.create(priority="high") for _ in range(2)]
    worker = await s.start_worker("refused", capacity=2, credentials=credentials)

    assert await worker.exited(within=50) == 1
    log = worker.log()
    assert "level=ERROR logger=worker_sdk.poller claim refused, hint kept taskId=" in log
    assert f"missingScopes=queue:claim-task:{s.provisioner_id}/{WORKER_TYPE}" in log
    assert "worker giving up" in log
    assert await s.message_count("high") == 2, "both hints stay for a worker that may claim"
    assert [(await s.status(t))["state"] for t in task_ids] == ["pending", "pending"]
    # a worker that may claim completes them once the hints the refused worker took are
    # visible again: within the poll visibility timeout
    await s.start_worker("rescuer", capacity=2)
    await s.resolved(*task_ids, within=60)
    assert [(await s.status(t))["state"] for t in task_ids] == ["completed", "completed"]


async def test_no_hints_are_taken_while_the_coordinator_does_not_answer(
    e2e: MakeE2E, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hint taken while claims get no answer is released (visible again a second later): the
    worker takes one batch, then only pings until the coordinator is back."""
    monkeypatch.setattr(azure_poller, "CLAIM_RETRY_WINDOW", 0.5)
    s = await e2e(claim_work=False)
    ran: list[str] = []

    async def handle(run: TaskRun) -> None:
        ran.append(run.task_id)

    worker = s.worker(handle)

    def lines(text: str) -> int:
        return sum(text in record.getMessage() for record in caplog.records)

    async def logged(text: str, count: int = 1) -> None:
        async def present() -> bool:
            return lines(text) >= count

        await s.eventually(present, what=f"{count}x {text!r}")

    caplog.set_level(logging.INFO, logger="worker_sdk")
    async with running(worker):
        await logged("poll urls refreshed")
        await s.coordinator_process.kill()
        unknown = [slugid.nice() for _ in range(3)]
        async with s.azure_queue("lowest") as queue:
            for task_id in unknown:
                await queue.send_message(encode_hint(task_id=task_id, run_id=0, hint_id="h"))
        await logged("coordinator not answering")
        await logged("poll failed", count=lines("poll failed") + 3)

        async def released() -> bool:
            async with s.azure_queue("lowest") as queue:
                visible = await queue.peek_messages(max_messages=32)
            # one hint taken and released; the others never taken while claims get no answer
            return sorted(m.dequeue_count or 0 for m in visible) == [0, 0, 1]

        await s.eventually(released, what="the taken hint released, the others untouched")

        await s.coordinator_process.start()
        await logged("coordinator answers again, polling resumed")
        await logged("hint not claimable", count=3)
        task_id = await s.create()
        await s.resolved(task_id)
    assert ran == [task_id]
