"""End to end: real ``queue-worker`` processes against a real ``queue-coordinator serve``
process (SQLite, Hawk authentication on) and a real Azurite (issue 4).

Tasks are created and canceled with the official ``taskcluster`` client signed as root; the
workers sign as a client that holds only the worker scopes for this test's worker type, then
with each run's temporary credentials. The handler (tests/e2e_handlers.py) journals every
start, end and cancellation, so the test sees what each worker process really ran, when, and
whether it ran anything twice. Each worker-process test runs in both modes: polling Azure
through signed URLs, and ``--claim-work``. Poison messages and the DequeueCount warning
concern only the Azure mode.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import logging
import os
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import slugid
import taskcluster.aio
from azure.storage.queue.aio import QueueClient

from coordinator.api.clients import ensure_root_client
from coordinator.azure.hint_codec import encode_hint
from coordinator.azure.names import queue_name
from devharness.azurite import AzuriteProcess
from devharness.processes import end_processes, spawn
from devharness.waiting import WaitTimeout, wait_until
from tests import e2e_handlers
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.coordinator import CoordinatorProcess, RunningCoordinator, task_definition
from worker_sdk import Backoff, Handler, TaskRun, Worker

QUEUE_WORKER = Path(sys.executable).parent / "queue-worker"
WORKER_TYPE = "e2e-wt"
WORKER_GROUP = "e2e"
HANDLER = "tests.e2e_handlers:handle"

MODES = [pytest.param(False, id="azure"), pytest.param(True, id="claimWork")]


@dataclass(kw_only=True)
class WorkerProcess:
    """One ``queue-worker`` child process; its output goes to ``log_path``."""

    name: str
    process: asyncio.subprocess.Process
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    async def exited(self, within: float = 30.0) -> int:
        """Wait for the process to exit; its status."""
        try:
            return await asyncio.wait_for(self.process.wait(), timeout=within)
        except TimeoutError:
            raise AssertionError(
                f"worker {self.name} still runs after {within}s:\n{self.log()[-3000:]}"
            ) from None


@dataclass(kw_only=True)
class E2E:
    """One test's coordinator process, producer client, worker processes and journal."""

    coordinator: RunningCoordinator
    coordinator_process: CoordinatorProcess
    queue: Any
    """The official ``taskcluster.aio.Queue``, signed as root."""
    worker_credentials: dict[str, str]
    provisioner_id: str
    queue_prefix: str
    connection_string: str
    claim_work: bool
    directory: Path
    workers: list[WorkerProcess] = field(default_factory=list)

    @property
    def journal_path(self) -> Path:
        return self.directory / "journal.jsonl"

    async def create(
        self,
        *,
        priority: str = "lowest",
        worker_type: str = WORKER_TYPE,
        retries: int = 5,
        claim_timeout: int | None = None,
        **payload: Any,
    ) -> str:
        task_id: str = slugid.nice()
        definition = task_definition(
            provisionerId=self.provisioner_id,
            workerType=worker_type,
            priority=priority,
            retries=retries,
            payload=payload,
        )
        if claim_timeout is not None:
            definition["claimTimeout"] = claim_timeout
        await self.queue.createTask(task_id, definition)
        return task_id

    async def status(self, task_id: str) -> dict[str, Any]:
        status: dict[str, Any] = (await self.queue.status(task_id))["status"]
        return status

    async def runs(self, task_id: str) -> list[tuple[str, str, str | None, str | None]]:
        """(state, reasonCreated, reasonResolved, workerId) of each run."""
        return [
            (r["state"], r["reasonCreated"], r.get("reasonResolved"), r.get("workerId"))
            for r in (await self.status(task_id))["runs"]
        ]

    async def resolved(self, *task_ids: str, within: float = 30.0) -> None:
        """Wait until no task of ``task_ids`` is pending or running."""
        left = list(task_ids)

        async def all_resolved() -> bool:
            while left:
                if (await self.status(left[-1]))["state"] in ("pending", "running"):
                    return False
                left.pop()
            return True

        await self.eventually(all_resolved, within=within, what=f"{len(task_ids)} tasks resolved")

    def journal(self) -> list[dict[str, Any]]:
        """Every complete journal line (a reader may see a write half done: the last line,
        without its newline yet, is left for the next look)."""
        if not self.journal_path.exists():
            return []
        *complete, _ = self.journal_path.read_text().split("\n")
        return [json.loads(line) for line in complete]

    def events(self, event: str, task_id: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.journal()
            if e["event"] == event and (task_id is None or e["taskId"] == task_id)
        ]

    async def journaled(
        self, event: str, task_id: str, run_id: int = 0, within: float = 30.0
    ) -> dict[str, Any]:
        """Wait for the journal line ``event`` of the run; returns it."""
        found: list[dict[str, Any]] = []

        async def present() -> bool:
            found[:] = [e for e in self.events(event, task_id) if e["runId"] == run_id]
            return bool(found)

        await self.eventually(present, within=within, what=f"{event} of {task_id}/{run_id}")
        return found[0]

    async def logged(self, worker: WorkerProcess, text: str, count: int = 1) -> None:
        async def present() -> bool:
            return worker.log().count(text) >= count

        await self.eventually(present, what=f"{count}x {text!r} in the log of {worker.name}")

    async def eventually(
        self, predicate: Callable[[], Awaitable[bool]], *, within: float = 30.0, what: str
    ) -> None:
        """:func:`wait_until`, failing with the tails of the worker logs."""
        try:
            await wait_until(predicate, within=within, what=what)
        except WaitTimeout as error:
            tails = "".join(f"\n--- {w.name} ---\n{w.log()[-2000:]}" for w in self.workers)
            raise AssertionError(f"{error}{tails}") from None

    async def start_worker(
        self,
        name: str,
        *,
        capacity: int = 1,
        grace_period: float = 60.0,
        flags: Sequence[str] = (),
        credentials: Mapping[str, str] | None = None,
    ) -> WorkerProcess:
        """A ``queue-worker`` process running the journaling handler as ``workerId`` ``name``,
        with further command-line ``flags``, signing as ``credentials`` (default: the client
        with the worker scopes of this test's worker type)."""
        log_path = self.directory / f"worker-{name}.log"
        credentials = credentials or self.worker_credentials
        env = {
            **os.environ,
            "TASKCLUSTER_ROOT_URL": self.coordinator.url,
            "TASKCLUSTER_CLIENT_ID": credentials["clientId"],
            "TASKCLUSTER_ACCESS_TOKEN": credentials["accessToken"],
            e2e_handlers.JOURNAL_ENV: str(self.journal_path),
            e2e_handlers.WORKER_ENV: name,
        }
        env.pop("TASKCLUSTER_CERTIFICATE", None)
        command = [
            str(QUEUE_WORKER),
            "--provisioner-id",
            self.provisioner_id,
            "--worker-type",
            WORKER_TYPE,
            "--worker-group",
            WORKER_GROUP,
            "--worker-id",
            name,
            "--capacity",
            str(capacity),
            "--grace-period",
            str(grace_period),
            *(["--claim-work"] if self.claim_work else []),
            *flags,
            HANDLER,
        ]
        process = await spawn(command, env=env, log=log_path)
        worker = WorkerProcess(name=name, process=process, log_path=log_path)
        self.workers.append(worker)
        return worker

    def worker(self, handler: Handler, **options: Any) -> Worker:
        """A :class:`Worker` in this process (``workerId`` ``in-process``) for this test's
        worker type, signing as the worker client, quick to poll and to retry; ``options``
        go to the Worker as they are."""
        settings: dict[str, Any] = {
            "worker_id": "in-process",
            "idle_delay": 0.1,
            "backoff": Backoff(base=0.05, cap=0.5),
            "handle_signals": False,
            **options,
        }
        return Worker(
            root_url=self.coordinator.url,
            credentials=self.worker_credentials,
            provisioner_id=self.provisioner_id,
            worker_type=WORKER_TYPE,
            worker_group=WORKER_GROUP,
            handler=handler,
            **settings,
        )

    def queue_name(self, priority: str) -> str:
        return queue_name(self.queue_prefix, self.provisioner_id, WORKER_TYPE, priority)

    def azure_queue(self, priority: str) -> QueueClient:
        """The priority's Azure queue, with the account key (behind the coordinator's back)."""
        return QueueClient.from_connection_string(self.connection_string, self.queue_name(priority))

    async def message_count(self, priority: str) -> int:
        """Every message in the queue, visible or not."""
        async with self.azure_queue(priority) as client:
            properties = await client.get_queue_properties()
        return properties.approximate_message_count or 0


def worker_client(clients_file: Path, provisioner_id: str) -> dict[str, str]:
    """Add a client with only what a worker of this test's worker type needs."""
    document = json.loads(clients_file.read_text())
    for client in document["clients"]:
        if client["clientId"] == "e2e-worker":
            return {"clientId": client["clientId"], "accessToken": client["accessToken"]}
    credentials = {"clientId": "e2e-worker", "accessToken": secrets.token_urlsafe(33)}
    document["clients"].append(
        {
            **credentials,
            "scopes": [
                f"queue:poll-task-urls:{provisioner_id}/{WORKER_TYPE}",
                f"queue:claim-task:{provisioner_id}/{WORKER_TYPE}",
                f"queue:claim-work:{provisioner_id}/{WORKER_TYPE}",
                f"queue:worker-id:{WORKER_GROUP}/*",
            ],
        }
    )
    replacement = clients_file.with_name(clients_file.name + ".new")
    fd = os.open(replacement, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(document, file)
    replacement.replace(clients_file)
    return credentials


MakeE2E = Callable[..., Awaitable[E2E]]


@pytest.fixture
async def e2e(
    coordinator_process: Callable[..., CoordinatorProcess],
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    tmp_path: Path,
) -> AsyncIterator[MakeE2E]:
    """``await e2e(claim_work=..., claim_timeout=seconds, poll_visibility=seconds)``: a
    coordinator process with auth on; worker processes started through it are killed at the
    end of the test."""
    made: list[E2E] = []
    sessions = []

    async def make(
        *, claim_work: bool, claim_timeout: float = 1200, poll_visibility: float = 300
    ) -> E2E:
        clients_file = tmp_path / "clients.json"
        root = ensure_root_client(clients_file)
        worker_credentials = worker_client(clients_file, azure_namespace.provisioner_id)
        process = coordinator_process(
            azure_connection_string=azurite.connection_string,
            queue_prefix=azure_namespace.queue_prefix,
            auth_enabled=True,
            clients_file=clients_file,
            claim_timeout=int(claim_timeout * 1000),
            poll_visibility=int(poll_visibility * 1000),
            resolver_interval=200,
        )
        coordinator = await process.start()
        session = taskcluster.aio.createSession()
        sessions.append(session)
        credentials = {"clientId": root.client_id, "accessToken": root.access_token}
        queue = taskcluster.aio.Queue(
            {"rootUrl": coordinator.url, "credentials": credentials}, session=session
        )
        setup = E2E(
            coordinator=coordinator,
            coordinator_process=process,
            queue=queue,
            worker_credentials=worker_credentials,
            provisioner_id=azure_namespace.provisioner_id,
            queue_prefix=azure_namespace.queue_prefix,
            connection_string=azurite.connection_string,
            claim_work=claim_work,
            directory=tmp_path,
        )
        made.append(setup)
        return setup

    yield make
    for setup in made:
        await end_processes((worker.process for worker in setup.workers), signum=signal.SIGKILL)
    for session in sessions:
        await session.close()


def started_by(events: list[dict[str, Any]]) -> dict[tuple[str, int], list[str]]:
    """Who started each (taskId, runId), in journal order."""
    starts: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
    for event in events:
        if event["event"] == "start":
            starts[(event["taskId"], event["runId"])].append(event["worker"])
    return starts


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
    s = await e2e(claim_work=claim_work, claim_timeout=3)
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
    s = await e2e(claim_work=claim_work, claim_timeout=3)
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


async def test_a_tasks_short_claim_timeout_retries_it_soon_after_its_worker_is_killed(
    e2e: MakeE2E,
) -> None:
    s = await e2e(claim_work=False)  # the coordinator's claim timeout: 20 minutes
    task_id = await s.create(sleep=[60, 0.1], claim_timeout=30)
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
async def test_cancel_task_cancels_the_running_handler_at_the_next_reclaim(
    e2e: MakeE2E, claim_work: bool
) -> None:
    s = await e2e(claim_work=claim_work, claim_timeout=3)
    task_id = await s.create(sleep=60)
    worker = await s.start_worker("w")
    await s.journaled("start", task_id)
    await s.queue.cancelTask(task_id)

    await s.journaled("cancelled", task_id, within=10)
    await s.logged(worker, f"run abandoned, claim lost taskId={task_id} runId=0")
    assert f"claim lost taskId={task_id} runId=0" in worker.log()
    worker.signal(signal.SIGTERM)
    assert await worker.exited() == 0
    reports = [
        line
        for line in worker.log().splitlines()
        if f"taskId={task_id}" in line and ("report" in line or "run resolved" in line)
    ]
    assert reports == [], "nothing is reported for a run whose claim was lost"
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
        running = asyncio.create_task(worker.run())
        try:
            await s.resolved(overdue, fresh)
        finally:
            worker.stop()
            await asyncio.wait_for(running, timeout=30)

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
