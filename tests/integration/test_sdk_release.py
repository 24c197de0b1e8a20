"""A dead coordinator must not strand the hints its workers took (issue 24): the worker SDK
releases a hint it could not claim for want of an answering coordinator, and fails over
between the root URLs of a coordinator's replicas.

Against the coordinator double (tests/fixtures/coordinator_double.py), which plays a dead
coordinator on cue (dropped connections, 503s, a replica killed) and counts releases; then
against the real coordinator in this process and a real Azurite, where the release URL the
coordinator signs is executed by Azure itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import aiohttp
import pytest
import slugid
from aiohttp import web
from azure.storage.queue.aio import QueueClient

from coordinator.api.server import AppRunner
from coordinator.app import build_app
from coordinator.azure.queues import QueueService
from coordinator.domain.lifecycle import Hint
from devharness.azurite import AzuriteProcess
from devharness.ports import free_port
from devharness.waiting import wait_until
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.coordinator import StartCoordinator, base_config
from tests.fixtures.coordinator_double import CoordinatorDouble, eventually, hint_text
from tests.fixtures.sdk import MODES, QUICK_IDLE_RATE, make_worker, reports, route, running
from worker_sdk import Backoff, RequestFailed, Worker, azure_poller
from worker_sdk.client import CoordinatorClient

WORKER_TYPE = "release-wt"


def lines(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


# --- releasing hints (the double) -------------------------------------------------------------


@MODES
@pytest.mark.parametrize("fault", [0, 503], ids=["dropped", "503"])
async def test_a_hint_no_coordinator_would_claim_is_released_then_claimed_once_one_answers(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture, batches: bool, fault: int
) -> None:
    """The claim is retried briefly, then its message made visible again through the release
    URL (Update Message, the URL's short visibility), never deleted; the worker takes no more
    hints until a coordinator answers its ping, then claims the run."""
    double.add_task("t1")
    [hint] = double.queues["lowest"]
    claims = route(double, batches, "claimTask")
    double.faults[claims] = [fault] * 10_000
    double.faults["ping"] = [fault] * 10_000

    async with running(make_worker(double, lambda run: None)):
        await eventually(lambda: double.routes(claims) != [], what="the first claim")
        first_claim = time.monotonic()
        # Released after the short window, not held for the long one; a loaded machine can
        # stretch the short one a few seconds (6.6 s once, the suite's e2e tests beside it).
        await eventually(lambda: double.released != [], within=30.0, what="the release")
        assert time.monotonic() - first_claim < azure_poller.CLAIM_RETRY_WINDOW / 2
        assert double.released == [(hint.message_id, double.release_visibility)]
        assert double.deleted == []
        await eventually(lambda: hint in double.visible("lowest"), what="the hint visible")
        await eventually(lambda: len(double.routes("ping")) >= 2, what="pings while lost")
        assert len(double.routes(claims)) > 1, "retried before the release"
        attempts = len(double.routes(claims))

        double.faults.clear()  # a coordinator answers again
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert reports(double) == {"t1": ("completed", None)}
    assert len(double.routes(claims)) == attempts + 1, "no claims while the coordinator was lost"
    assert double.deleted == [hint.message_id]
    [released] = lines(caplog, "claim failed, releasing hint")
    assert "taskId=t1 runId=0 queue=lowest" in released
    assert "sig=" not in caplog.text, "the SAS signatures stay out of logs"


async def test_hints_of_runs_that_are_gone_are_deleted_not_released(
    double: CoordinatorDouble,
) -> None:
    double.put("lowest", hint_text("t-unknown", 0))  # 404: no such task
    double.add_task("t-done")
    double.run("t-done").state = "completed"  # 409: not pending

    async with running(make_worker(double, lambda run: None, capacity=2)):
        await eventually(lambda: len(double.deleted) == 2, what="both hints deleted")
    assert double.released == []
    assert double.routes("updateMessage") == []


async def test_an_older_coordinator_without_release_urls_keeps_the_hint_as_before(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(azure_poller, "CLAIM_RETRY_WINDOW", 0.0)
    double.release_urls = False
    double.visibility_timeout = 0.2
    double.add_task("t-flaky")
    double.faults["claimRuns"] = [503]

    async with running(make_worker(double, lambda run: None)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert double.routes("updateMessage") == []
    assert len(lines(caplog, "claim failed, hint kept taskId=t-flaky")) == 1
    assert double.routes("claimRuns") == ["t-flaky/0"] * 2, "claimed once visible again"


async def test_hints_taken_as_the_worker_stops_are_released_unclaimed(
    double: CoordinatorDouble,
) -> None:
    double.add_task("t1", priority="highest")
    double.add_task("t2", priority="highest")
    double.get_gate = asyncio.Event()
    worker = make_worker(double, lambda run: None, capacity=2, polls_in_flight=1)

    async with running(worker):
        await eventually(lambda: double.gets("highest") == 1, what="a get on its way")
        worker.stop()
        double.get_gate.set()
        await eventually(lambda: len(double.released) == 2, what="both hints released")
    assert double.routes("claimRuns") == double.routes("claimTask") == []
    assert double.deleted == [] and double.reports == []


async def test_the_double_answers_what_its_schemas_forbid_with_a_500_and_records_it(
    double: CoordinatorDouble,
) -> None:
    """The double's own check: a definition the real API could never serve (a payload that
    is no object) makes its claim answer a violation; the fixture would fail the test."""
    double.add_task("t-bad", payload=["not", "an", "object"])

    async with running(make_worker(double, lambda run: None)):
        await eventually(lambda: double.violations != [], what="the violation")
    assert "claim-runs-response" in double.violations[0]
    assert "['not', 'an', 'object'] is not of type 'object'" in double.violations[0]
    double.violations.clear()  # seen: do not fail the test at teardown


# --- failing over between root URLs (the double's replicas) ------------------------------------


async def test_a_worker_fails_over_to_the_next_root_url_and_stays_with_it(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    first = await double.add_replica()
    worker = make_worker(
        double,
        lambda run: None,
        root_url=None,
        root_urls=[first, double.root_url],
        polls_in_flight=1,
    )
    async with running(worker):
        double.add_task("t1")
        await eventually(lambda: len(double.reports) == 1, what="t1 reported")
        assert double.served[double.root_url] == 0, "only the first root URL while it answers"

        await double.kill(first)
        double.add_task("t2")
        await eventually(lambda: len(double.reports) == 2, what="t2 reported")
        double.add_task("t3")
        await eventually(lambda: len(double.reports) == 3, what="t3 reported")
    assert set(reports(double)) == {"t1", "t2", "t3"}
    assert double.released == [], "no claim met a dead coordinator: the next one answered"
    [switched] = lines(caplog, "coordinator failover")
    assert switched == f"coordinator failover rootUrl={double.root_url} previous={first}"
    assert len(lines(caplog, "coordinator not answering, trying the next one")) == 1, (
        "the worker stays with the root URL that answered"
    )


async def test_a_refusal_is_an_answer_and_is_not_failed_over(double: CoordinatorDouble) -> None:
    first = await double.add_replica()
    double.faults["ping"] = [403]
    async with aiohttp.ClientSession() as session:
        client = CoordinatorClient(
            session=session, root_urls=[first, double.root_url], credentials=None
        )
        with pytest.raises(RequestFailed) as refused:
            await client.ping()
        assert refused.value.status == 403
        assert double.served == {first: 1}

        await double.kill(first)
        await client.ping()
        assert double.served[double.root_url] == 1

        lone = CoordinatorClient(session=session, root_url=first, credentials=None)
        with pytest.raises(RequestFailed) as dead:
            await lone.ping()
        assert dead.value.status is None and dead.value.transient


# --- the real coordinator and Azurite ----------------------------------------------------------


@pytest.fixture
async def coordinator_to_kill(
    azurite: AzuriteProcess, azure_namespace: AzureNamespace, tmp_path: Path
) -> AsyncIterator[tuple[str, AppRunner]]:
    """A coordinator in this process (auth off) and its runner, for the test to stop."""
    config = base_config(
        tmp_path,
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
    )
    runner = AppRunner(build_app(config), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, config.host, config.port).start()
    yield config.public_url, runner
    await runner.cleanup()


async def test_a_hint_taken_after_the_coordinator_died_is_visible_again_in_azurite(
    coordinator_to_kill: tuple[str, AppRunner],
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root_url, runner = coordinator_to_kill
    worker = Worker(
        root_url=root_url,
        credentials=None,
        provisioner_id=azure_namespace.provisioner_id,
        worker_type=WORKER_TYPE,
        handler=lambda run: None,
        idle_delay=0.1,
        idle_rate=QUICK_IDLE_RATE,
        backoff=Backoff(base=0.05, cap=0.5),
        handle_signals=False,
    )
    settings = azure_namespace.queue_settings()
    async with (
        running(worker),
        QueueService(azurite.connection_string, settings) as queues,
        QueueClient.from_connection_string(
            azurite.connection_string,
            queues.name(azure_namespace.provisioner_id, WORKER_TYPE, "lowest"),
        ) as lowest,
    ):
        await eventually(lambda: bool(lines(caplog, "poll urls refreshed")), what="signed URLs")
        await runner.cleanup()  # the coordinator dies: connections are refused from now on
        now = int(time.time() * 1000)
        hint = Hint(
            task_id=slugid.nice(),
            run_id=0,
            provisioner_id=azure_namespace.provisioner_id,
            worker_type=WORKER_TYPE,
            priority="lowest",
            deadline=now + 3_600_000,
            visible_at=now,
        )
        assert await queues.put_hint(hint, now=now)

        await eventually(lambda: bool(lines(caplog, "claim failed, releasing")), what="a claim")
        released_at = time.monotonic()

        async def visible() -> bool:
            return [m.dequeue_count for m in await lowest.peek_messages()] == [1]

        await wait_until(visible, within=10, what="the hint visible again, received once")
        # the URL's visibility timeout, the coordinator's default of 1 s, plus Azurite's rounding
        assert time.monotonic() - released_at < 5
    assert f"taskId={hint.task_id} runId=0" in lines(caplog, "claim failed, releasing")[0]
    assert lines(caplog, "hint release failed") == []


async def test_release_urls_carry_an_update_only_signature(
    start_coordinator: StartCoordinator,
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
) -> None:
    """What the coordinator signs: a release URL that Azure lets update a message and nothing
    else, with the placeholders of the delete URL and a short visibility timeout."""
    coordinator = await start_coordinator(
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
    )
    answer = await coordinator.call(
        "GET", f"/poll-task-url/{azure_namespace.provisioner_id}/{WORKER_TYPE}"
    )
    assert answer.status == 200, answer.body
    lowest = answer.body["queues"][-1]
    release = lowest["signedReleaseUrl"]
    query = dict(parse_qsl(urlsplit(release).query))
    assert (query["popreceipt"], query["visibilitytimeout"], query["sp"]) == (
        "{{popReceipt}}",
        "1",
        "u",
    )
    assert release.split("?")[0] == lowest["signedDeleteUrl"].split("?")[0]
    # the same signature on Get Messages and Delete Message: refused
    sas = urlencode(
        {k: v for k, v in query.items() if k not in ("popreceipt", "visibilitytimeout")}
    )
    queue_url = release.split("/messages/")[0]
    async with aiohttp.ClientSession() as session:
        for method, url in [
            ("GET", f"{queue_url}/messages?{sas}"),
            ("DELETE", f"{queue_url}/messages/x?popreceipt=y&{sas}"),
        ]:
            async with session.request(method, url) as refused:
                assert refused.status == 403, (method, await refused.text())


async def test_a_worker_given_a_dead_root_url_first_works_through_the_next(
    start_coordinator: StartCoordinator,
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    caplog: pytest.LogCaptureFixture,
) -> None:
    coordinator = await start_coordinator(
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
    )
    dead = f"http://127.0.0.1:{free_port()}"
    done: list[str] = []
    worker = Worker(
        root_urls=[dead, coordinator.url],
        credentials=None,
        provisioner_id=azure_namespace.provisioner_id,
        worker_type=WORKER_TYPE,
        handler=lambda run: done.append(run.task_id),
        idle_delay=0.1,
        idle_rate=QUICK_IDLE_RATE,
        handle_signals=False,
    )
    async with running(worker):
        created = [
            await coordinator.create(
                provisionerId=azure_namespace.provisioner_id, workerType=WORKER_TYPE
            )
            for _ in range(3)
        ]

        async def completed() -> bool:
            for task_id in created:
                status = await coordinator.call("GET", f"/task/{task_id}/status")
                if status.body["status"]["state"] != "completed":
                    return False
            return True

        await wait_until(completed, within=20, what="3 tasks completed")
    assert sorted(done) == sorted(created)
    assert lines(caplog, "coordinator failover") == [
        f"coordinator failover rootUrl={coordinator.url} previous={dead}"
    ]
    assert all(r.levelno < logging.ERROR for r in caplog.records if r.name.startswith("worker_sdk"))


@pytest.mark.parametrize("batches", [True, False], ids=["claimRuns", "claimTask"])
async def test_a_hint_of_a_paused_queue_is_released_for_retry_after(
    start_coordinator: StartCoordinator,
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    caplog: pytest.LogCaptureFixture,
    batches: bool,
) -> None:
    """A claim answered 429 (the task queue is paused) is not a dead hint: the worker neither
    deletes it nor leaves it hidden for the poll visibility (300 s), but releases it to be
    visible again after ``Retry-After`` (5 s for a pause)."""
    prov = azure_namespace.provisioner_id
    coordinator = await start_coordinator(
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
    )
    queue_path = f"/task-queues/{prov}%2F{WORKER_TYPE}"
    await coordinator.ok("POST", queue_path + "/pause", {"reason": "test"})
    task_id = await coordinator.create(provisionerId=prov, workerType=WORKER_TYPE)
    worker = Worker(
        root_url=coordinator.url,
        credentials=None,
        provisioner_id=prov,
        worker_type=WORKER_TYPE,
        handler=lambda run: None,
        idle_delay=0.1,
        batching=batches,
        handle_signals=False,
    )
    settings = azure_namespace.queue_settings()
    async with (
        QueueService(azurite.connection_string, settings) as queues,
        QueueClient.from_connection_string(
            azurite.connection_string, queues.name(prov, WORKER_TYPE, "lowest")
        ) as lowest,
    ):
        async with running(worker):
            await eventually(
                lambda: bool(lines(caplog, "claim throttled, hint released")), what="a release"
            )
            released_at = time.monotonic()  # before the worker's stop, which takes its time
        [released] = lines(caplog, "claim throttled, hint released")
        assert f"taskId={task_id} runId=0" in released and "retryAfter=5" in released

        async def visible() -> bool:
            return bool(await lowest.peek_messages())

        await wait_until(visible, within=15, what="the hint visible again")
        # hidden for Retry-After (Azurite rounds to the second), not 300 s, and not deleted
        assert 3 <= time.monotonic() - released_at < 10
    assert (await coordinator.status(task_id))["state"] == "pending"
    assert lines(caplog, "hint release failed") == []
