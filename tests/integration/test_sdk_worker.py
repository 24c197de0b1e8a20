"""The Worker against the coordinator test double (see tests/fixtures/coordinator_double.py): the
worker protocol over real HTTP on 127.0.0.1, with the failures only a double produces on cue and
the requests only a double can count. tests/integration/test_sdk_real.py runs the main paths against
the real coordinator and Azurite.

Tests of claims, reclaims and reports run twice (``MODES``): with the double's batch routes,
and without them, as an older coordinator, so that the worker falls back to the single calls.
What is peculiar to batching is tested in tests/integration/test_sdk_batching.py.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.fixtures.coordinator_double import WORKER, CoordinatorDouble, eventually, hint_text
from tests.fixtures.sdk import MODES, Overlap, make_worker, renewed, reports, route, running
from worker_sdk import (
    Backoff,
    InternalError,
    MalformedPayload,
    RequestFailed,
    ResourceUnavailable,
    RetryTask,
    TaskRun,
    azure_poller,
)
from worker_sdk.timing import DATE_RESOLUTION, LONG_POLL_TRANSIT


def item_fault(double: CoordinatorDouble, batches: bool, single: str, run: str) -> str:
    """Give the double batch routes or not; the ``faults`` key of one run's answers of
    ``single``: an item of the batch route's answer, or the single call itself."""
    name = route(double, batches, single)
    return f"{name}:{run}" if batches else name


def recording(
    double: CoordinatorDouble, tasks: int
) -> tuple[list[str], Callable[[TaskRun], Awaitable[None]]]:
    """Tasks ``t0`` ... of highest priority in the double, and a handler that records the
    taskIds it runs in the list returned with it."""
    for n in range(tasks):
        double.add_task(f"t{n}", priority="highest")
    handled: list[str] = []

    async def handle(run: TaskRun) -> None:
        handled.append(run.task_id)

    return handled, handle


async def test_polls_ask_for_the_free_capacity_and_never_exceed_it(
    double: CoordinatorDouble,
) -> None:
    for n in range(3):
        double.add_task(f"t{n}", priority="highest")
    release = asyncio.Event()
    handle = Overlap(release.wait)

    async with running(make_worker(double, handle, capacity=2)):
        await eventually(lambda: len(handle.active) == 2, what="two runs")
        polls_while_full = len(double.routes("getMessages"))
        release.set()
        await eventually(lambda: len(double.reports) == 3, what="three reports")
    polls = double.routes("getMessages")
    assert polls[:2] == ["highest:1", "highest:1"], "two polls, each for half the capacity"
    assert "highest:1" in polls[polls_while_full:], "one slot free after a run finished"
    assert handle.most == 2


async def test_a_worker_refuses_no_polls_in_flight(double: CoordinatorDouble) -> None:
    with pytest.raises(ValueError, match="polls_in_flight must be at least 1"):
        make_worker(double, lambda run: None, polls_in_flight=0)


async def test_the_next_get_goes_out_while_a_claim_is_on_its_way(
    double: CoordinatorDouble,
) -> None:
    double.claim_gate = asyncio.Event()
    handled, handle = recording(double, 4)
    async with running(make_worker(double, handle, capacity=4)):
        # both halves of the capacity got their hints, and both claims wait at the gate
        await eventually(lambda: len(double.routes("claimRuns")) == 2, what="two claims")
        assert double.routes("getMessages")[:2] == ["highest:2", "highest:2"]
        assert not handled
        double.claim_gate.set()
        await eventually(lambda: len(double.reports) == 4, what="four reports")
    assert sorted(handled) == [f"t{n}" for n in range(4)]


@pytest.mark.parametrize("batch_routes", [True, False])
async def test_a_run_waiting_for_its_report_frees_its_slot_up_to_capacity_more(
    double: CoordinatorDouble, batch_routes: bool
) -> None:
    double.batch_routes = batch_routes
    double.report_gate = asyncio.Event()
    handled, handle = recording(double, 6)
    async with running(make_worker(double, handle, capacity=2)):
        # two handlers at once, and two more runs while the first two reports hang
        await eventually(lambda: len(handled) == 4, what="four runs handled")
        # four runs whose reports are held fill both slots and the two extra ones
        assert not double.reports, "all four reports are still held"
        double.report_gate.set()
        await eventually(lambda: len(double.reports) == 6, what="six reports")
    assert sorted(handled) == [f"t{n}" for n in range(6)]


async def test_weighted_polling_serves_the_lowest_priority_while_higher_ones_stay_full(
    double: CoordinatorDouble,
) -> None:
    """Strict polling never reaches lowest while highest and high have work; weighted polling
    (default weights: lowest gets 1/81 of the claims here) runs it with both still full."""
    double.keep_full = {"highest", "high"}
    for n in range(2):
        double.add_task(f"top-{n}", priority="highest")
        double.add_task(f"high-{n}", priority="high")
    # One: at 1/81 of the claims, three would need about 240 claims, which a loaded machine
    # may not make within the wait.
    lows = ["low-0"]
    for task_id in lows:
        double.add_task(task_id, priority="lowest")

    async with running(make_worker(double, lambda run: None, capacity=2)):
        await eventually(lambda: len(double.reports) >= 60, what="60 strict runs")
    assert {task_id for task_id, *_ in double.reports}.isdisjoint(lows)

    async with running(make_worker(double, lambda run: None, capacity=2, polling="weighted")):
        await eventually(
            lambda: all(double.run(t).state == "completed" for t in lows),
            within=30,
            what="the lowest-priority runs",
        )
        assert double.queues["highest"] and double.queues["high"], "still full"


@MODES
async def test_handler_results_become_reports(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture, batches: bool
) -> None:
    report_route = route(double, batches, "completed")
    errors: dict[str, Exception | None] = {
        "t-ok": None,
        "t-malformed": MalformedPayload("payload lacks a command"),
        "t-unavailable": ResourceUnavailable("artifact gone"),
        "t-internal": InternalError("disk full"),
        "t-boom": RuntimeError("boom"),
    }
    for task_id in errors:
        double.add_task(task_id)

    async def handle(run: TaskRun) -> None:
        error = errors[run.task_id]
        if error is not None:
            raise error

    async with running(make_worker(double, handle, capacity=5)):
        await eventually(lambda: len(double.reports) == 5, what="five reports")
    assert reports(double) == {
        "t-ok": ("completed", None),
        "t-malformed": ("exception", "malformed-payload"),
        "t-unavailable": ("exception", "resource-unavailable"),
        "t-internal": ("exception", "internal-error"),
        "t-boom": ("failed", None),
    }
    [failure] = [r for r in caplog.records if r.getMessage().startswith("handler failed")]
    assert failure.getMessage() == "handler failed taskId=t-boom runId=0 retriesLeft=5"
    assert failure.exc_info is not None and failure.exc_info[1] is errors["t-boom"]
    run_credentials = double.run("t-ok").credentials
    assert run_credentials is not None
    # Batches are signed with the worker's credentials, single reports with the run's.
    signer = WORKER.client_id if batches else run_credentials.client_id
    assert (report_route, signer) in double.signers


async def test_retries_are_asked_for_while_the_task_has_some_left(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    """RetryTask, and with retry_failures any ordinary exception, reports intermittent-task
    while the claim's status shows retries left, and failed on the task's last run."""
    retries_left = {"retry": 1, "retry-last": 0, "boom": 2, "boom-last": 0, "malformed": 3}
    for name, left in retries_left.items():
        double.add_task(f"t-{name}", retries_left=left)

    async def handle(run: TaskRun) -> None:
        assert run.retries_left == retries_left[run.task_id.removeprefix("t-")]
        if run.task_id.startswith("t-retry"):
            raise RetryTask("the network hiccuped")
        if run.task_id.startswith("t-boom"):
            raise RuntimeError("boom")
        raise MalformedPayload("never worth a retry")

    async with running(make_worker(double, handle, capacity=5, retry_failures=True)):
        await eventually(lambda: len(double.reports) == 5, what="five reports")
    assert reports(double) == {
        "t-retry": ("exception", "intermittent-task"),
        "t-retry-last": ("failed", None),
        "t-boom": ("exception", "intermittent-task"),
        "t-boom-last": ("failed", None),
        "t-malformed": ("exception", "malformed-payload"),
    }
    [retried] = [r for r in caplog.records if "taskId=t-boom runId=0 reason=" in r.getMessage()]
    assert retried.exc_info is not None, "a failure being retried keeps its traceback"


async def test_sync_handlers_run_in_threads_and_async_ones_on_the_loop(
    double: CoordinatorDouble,
) -> None:
    threads: dict[str, str] = {}

    def handle_sync(run: TaskRun) -> None:
        threads[run.task_id] = threading.current_thread().name

    async def handle_async(run: TaskRun) -> None:
        threads[run.task_id] = threading.current_thread().name

    double.add_task("t-sync")
    async with running(make_worker(double, handle_sync, capacity=1)):
        await eventually(lambda: len(double.reports) == 1, what="the sync run")
    double.add_task("t-async")
    async with running(make_worker(double, handle_async, capacity=1)):
        await eventually(lambda: len(double.reports) == 2, what="the async run")
    sync_thread, async_thread = threads["t-sync"], threads["t-async"]
    assert sync_thread != threading.main_thread().name
    assert async_thread == threading.main_thread().name
    assert {kind for _, _, kind, _ in double.reports} == {"completed"}


async def test_poison_hints_are_logged_and_deleted(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    garbage = [
        double.put("highest", "%%% not base64"),
        double.put("highest", base64.b64encode(b"not json").decode()),
        double.put("highest", base64.b64encode(b'{"taskId": "t"}').decode()),
    ]
    double.add_task("t-good", priority="highest")

    async with running(make_worker(double, lambda run: None, capacity=4)):
        await eventually(lambda: len(double.deleted) == 4, what="four deletes")
        await eventually(lambda: len(double.reports) == 1, what="the good run's report")
    assert {message.message_id for message in garbage} <= set(double.deleted)
    poison = [r for r in caplog.records if r.getMessage().startswith("poison hint deleted")]
    assert len(poison) == 3 and all(r.levelno == logging.WARNING for r in poison)
    assert all("queue=highest" in r.getMessage() for r in poison)


@MODES
async def test_hints_are_deleted_after_a_claim_answered_404_or_409(
    double: CoordinatorDouble, batches: bool
) -> None:
    claims = route(double, batches, "claimTask")
    double.put("highest", hint_text("t-unknown", 0))
    double.add_task("t-done")
    double.run("t-done").state = "completed"

    async with running(make_worker(double, lambda run: None, capacity=1)):
        await eventually(lambda: len(double.deleted) == 2, what="both hints deleted")
    assert double.routes(claims) == ["t-unknown/0", "t-done/0"]
    assert double.reports == []


@MODES
@pytest.mark.parametrize(("status", "dead"), [(400, True), (410, False), (422, False)])
async def test_only_400_404_and_409_mean_the_hint_is_dead(
    double: CoordinatorDouble,
    caplog: pytest.LogCaptureFixture,
    status: int,
    dead: bool,
    batches: bool,
) -> None:
    double.add_task("t1")
    double.faults[item_fault(double, batches, "claimTask", "t1/0")] = [status]
    seen = "hint not claimable" if dead else "claim failed, hint kept"

    async with running(make_worker(double, lambda run: None)):
        await eventually(lambda: seen in caplog.text, what=seen)
    assert len(double.deleted) == (1 if dead else 0)
    claims = route(double, batches, "claimTask")
    assert double.routes(claims) == ["t1/0"], "none of these is retried"


@MODES
async def test_a_refused_claim_keeps_its_hint_and_stops_the_worker_after_a_short_window(
    double: CoordinatorDouble,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    batches: bool,
) -> None:
    """A refusal of one run or, with batches, of the whole request (the worker-id scope)."""
    monkeypatch.setattr(azure_poller, "REFUSED_RETRY_WINDOW", 0.3)
    double.add_task("t1")
    claims = route(double, batches, "claimTask")
    double.faults[claims] = [403] * 1000

    with pytest.raises(RequestFailed) as failure:
        await asyncio.wait_for(make_worker(double, lambda run: None).run(), timeout=10)
    assert failure.value.status == 403
    assert double.deleted == [], "the hint is fine; the worker is not"
    assert len(double.routes(claims)) > 1, "retried within the window"
    [refused] = [r for r in caplog.records if r.getMessage().startswith("claim refused")]
    assert refused.levelno == logging.ERROR
    assert "taskId=t1 runId=0 queue=lowest status=403 code=Injected" in refused.getMessage()


@MODES
async def test_a_refusal_that_clears_within_the_window_only_delays_the_claim(
    double: CoordinatorDouble, batches: bool
) -> None:
    double.add_task("t1")
    [hint] = double.queues["lowest"]
    claims = route(double, batches, "claimTask")
    double.faults[claims] = [401, 403]

    async with running(make_worker(double, lambda run: None)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert double.routes(claims) == ["t1/0"] * 3
    assert double.deleted == [hint.message_id], "deleted once, after the claim"


@MODES
async def test_a_claim_that_fails_transiently_is_retried_and_its_hint_kept(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture, batches: bool
) -> None:
    """A 5xx or no answer is retried in place (the message stays hidden from everyone else
    anyway); the hint is deleted only once the claim succeeded."""
    double.add_task("t-flaky")
    [flaky] = double.queues["lowest"]
    claims = route(double, batches, "claimTask")
    double.faults[claims] = [503, 0]

    async with running(make_worker(double, lambda run: None, capacity=1)):
        await eventually(lambda: len(double.reports) == 1, what="the flaky run's report")
    assert double.routes(claims) == ["t-flaky/0"] * 3, "retried until it succeeded"
    assert double.deleted == [flaky.message_id], "deleted only after the claim"
    retried = [r.getMessage() for r in caplog.records if "claim retried" in r.getMessage()]
    assert len(retried) == 2 and all("taskId=t-flaky runId=0 queue=lowest" in m for m in retried)


@MODES
async def test_a_claim_failing_past_the_retry_window_keeps_its_hint(
    double: CoordinatorDouble,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    batches: bool,
) -> None:
    """With a coordinator that hands out no release URL (an older one), after the retry window
    the hint is left alone (not deleted) and comes back when its visibility timeout ends; the
    next claim then succeeds."""
    monkeypatch.setattr(azure_poller, "CLAIM_RETRY_WINDOW", 0.0)
    double.release_urls = False
    double.add_task("t-flaky")
    [flaky] = double.queues["lowest"]
    claims = route(double, batches, "claimTask")
    double.faults[claims] = [503]
    double.visibility_timeout = 0.2

    async with running(make_worker(double, lambda run: None, capacity=1)):
        await eventually(lambda: len(double.reports) == 1, what="the flaky run's report")
    assert double.routes(claims) == ["t-flaky/0"] * 2, "claimed when visible again"
    assert double.deleted == [flaky.message_id], "deleted only after the claim"
    kept = [r.getMessage() for r in caplog.records if "hint kept" in r.getMessage()]
    assert len(kept) == 1 and "taskId=t-flaky runId=0 queue=lowest" in kept[0]


async def test_failed_deletes_are_logged(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    double.add_task("t1", priority="high")
    double.faults["deleteMessage"] = [500]

    async with running(make_worker(double, lambda run: None)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    [line] = [r.getMessage() for r in caplog.records if "hint delete failed" in r.getMessage()]
    assert line.startswith("hint delete failed taskId=t1 runId=0 queue=high messageId=")
    assert "sig=" not in line, "the SAS signature stays out of logs"


async def test_hints_dequeued_too_often_log_the_documented_warning(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    double.add_task("t-often", priority="medium", hint=False)
    double.put("medium", hint_text("t-often", 0), dequeue_count=10)
    double.add_task("t-sometimes", priority="medium", hint=False)
    double.put("medium", hint_text("t-sometimes", 0), dequeue_count=9)

    async with running(make_worker(double, lambda run: None, capacity=2)):
        await eventually(lambda: len(double.reports) == 2, what="two reports")
    warnings = [r for r in caplog.records if r.getMessage().startswith("hint dequeued")]
    assert [(r.levelno, r.name, r.getMessage()) for r in warnings] == [
        (
            logging.WARNING,
            "worker_sdk.poller",
            "hint dequeued too often taskId=t-often runId=0 queue=medium dequeueCount=11",
        )
    ]


async def test_the_dequeue_warning_threshold_is_configurable(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    double.add_task("t1", hint=False)
    double.put("lowest", hint_text("t1", 0), dequeue_count=2)

    async with running(make_worker(double, lambda run: None, dequeue_warning=2)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert "dequeueCount=3" in caplog.text


async def test_azure_and_coordinator_failures_back_off_and_recover(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    double.add_task("t1")
    # (A dropped GET would not show: aiohttp silently retries idempotent requests once.)
    double.faults["pollTaskUrls"] = [503]
    double.faults["getMessages"] = [503, 500]

    async with running(make_worker(double, lambda run: None)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    retries = [r for r in caplog.records if r.getMessage().startswith("poll failed")]
    assert [r.getMessage().split(" failures=")[1].split()[0] for r in retries] == [
        "1",
        "2",
        "3",
    ], "consecutive failures grow the backoff"


async def test_a_rejected_signature_gets_fresh_urls(double: CoordinatorDouble) -> None:
    double.add_task("t1")
    double.faults["getMessages"] = [403]

    async with running(make_worker(double, lambda run: None)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert len(double.routes("pollTaskUrls")) == 2


async def test_signed_urls_are_refreshed_before_they_expire(double: CoordinatorDouble) -> None:
    double.url_life = 3.0

    async with running(make_worker(double, lambda run: None)):
        await eventually(
            lambda: len(double.routes("pollTaskUrls")) >= 3, within=10, what="two refreshes"
        )


@MODES
async def test_reclaims_keep_a_long_run_alive_with_fresh_credentials(
    double: CoordinatorDouble, batches: bool
) -> None:
    reclaims = route(double, batches, "reclaimTask")
    double.claim_timeout_s = 2.0
    double.add_task("t-long")
    observed: list[tuple[Any, str]] = []

    async def handle(run: TaskRun) -> None:
        observed.append((run.taken_until, run.credentials.client_id))
        await renewed(run, 2)
        observed.append((run.taken_until, run.credentials.client_id))

    async with running(make_worker(double, handle)):
        await eventually(lambda: len(double.reports) == 1, within=15, what="the report")
    assert reports(double) == {"t-long": ("completed", None)}
    (first_until, first_client), (last_until, last_client) = observed
    assert last_until > first_until and last_client != first_client
    reclaim_signers = [signer for name, signer in double.signers if name == reclaims]
    if batches:
        assert reclaim_signers[:2] == [WORKER.client_id] * 2
    else:
        # The double accepts only the latest credentials, so the report proves they were used.
        assert reclaim_signers[:2] == ["task-client/t-long/0/0", "task-client/t-long/0/1"]


@MODES
async def test_a_reclaim_conflict_cancels_the_handler_and_reports_nothing(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture, batches: bool
) -> None:
    double.claim_timeout_s = 1.5
    double.add_task("t-lost")
    double.faults[item_fault(double, batches, "reclaimTask", "t-lost/0")] = [409]
    cancelled = asyncio.Event()

    async def handle(run: TaskRun) -> None:
        if run.task_id == "t-lost":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                assert run.cancelled.is_set()
                cancelled.set()
                raise

    async with running(make_worker(double, handle)):
        await asyncio.wait_for(cancelled.wait(), timeout=10)
        double.add_task("t-next")
        await eventually(lambda: len(double.reports) == 1, what="the next run's report")
    assert reports(double) == {"t-next": ("completed", None)}, "nothing reported for t-lost"
    sent = [
        detail for name in ("exception", "failed", "resolveRuns") for detail in double.routes(name)
    ]
    assert not any("t-lost" in detail for detail in sent)
    assert "claim lost taskId=t-lost runId=0" in caplog.text


@MODES
async def test_transient_reclaim_and_report_errors_are_retried(
    double: CoordinatorDouble, batches: bool
) -> None:
    """With batches, failures of the whole request."""
    double.claim_timeout_s = 2.0
    double.add_task("t1")
    reclaims = route(double, batches, "reclaimTask")
    reports_route = route(double, batches, "completed")
    double.faults[reclaims] = [503, 0]
    double.faults[reports_route] = [500, 0]

    async def handle(run: TaskRun) -> None:
        await renewed(run, 1)

    async with running(make_worker(double, handle)):
        await eventually(lambda: len(double.reports) == 1, within=15, what="the report")
    assert reports(double) == {"t1": ("completed", None)}
    assert len(double.routes(reclaims)) == 3
    assert len(double.routes(reports_route)) == 3


DOUBLE_STAMPING = 0.5
"""Seconds the double may take between setting a claim's takenUntil and stamping its answer's
``Date``."""


@MODES
async def test_a_claim_that_cannot_be_renewed_is_given_up_at_takenuntil(
    double: CoordinatorDouble, batches: bool
) -> None:
    double.claim_timeout_s = 2.0
    double.add_task("t-expiring")
    reclaims = route(double, batches, "reclaimTask")
    double.faults[reclaims] = [503] * 1000
    cancelled_at: list[datetime] = []

    async def handle(run: TaskRun) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled_at.append(datetime.now(UTC))

    async with running(make_worker(double, handle, backoff=Backoff(base=0.1, cap=0.2))):
        await eventually(lambda: bool(cancelled_at), what="the handler's cancellation")
    taken_until = double.run("t-expiring").taken_until
    assert taken_until is not None
    # Never later than the server's deadline, and early only by what the worker allows for
    # the Date header's 1 s resolution and a long poll's transit (it measures the deadline
    # against the server's clock), and by the double's own time between setting takenUntil
    # and stamping its Date, which a loaded machine stretches (40 ms seen under the suite).
    early = timedelta(seconds=DATE_RESOLUTION + LONG_POLL_TRANSIT + DOUBLE_STAMPING)
    assert taken_until - early <= cancelled_at[0] <= taken_until
    assert double.reports == []
    assert len(double.routes(reclaims)) > 1, "retried until the deadline"


async def test_shutdown_lets_handlers_finish_within_the_grace_period_then_cancels(
    double: CoordinatorDouble,
) -> None:
    double.add_task("t-quick", priority="highest")
    double.add_task("t-stuck", priority="lowest")
    started: set[str] = set()
    finish_quick = asyncio.Event()

    async def handle(run: TaskRun) -> None:
        started.add(run.task_id)
        if run.task_id == "t-quick":
            await finish_quick.wait()
        else:
            await asyncio.Event().wait()

    worker = make_worker(double, handle, capacity=2, grace_period=0.5)
    task = asyncio.create_task(worker.run())
    await eventually(lambda: started == {"t-quick", "t-stuck"}, what="both runs")
    polls = len(double.routes("getMessages"))
    worker.stop()
    finish_quick.set()
    await asyncio.wait_for(task, timeout=10)
    assert reports(double) == {
        "t-quick": ("completed", None),
        "t-stuck": ("exception", "worker-shutdown"),
    }
    assert len(double.routes("getMessages")) == polls, "no polling after stop"


async def test_a_sync_handler_sees_cancellation_and_can_return_early(
    double: CoordinatorDouble,
) -> None:
    double.add_task("t-sync")
    started = threading.Event()

    def handle(run: TaskRun) -> None:
        started.set()
        run.cancelled.wait(timeout=30)

    worker = make_worker(double, handle, grace_period=0.2)
    task = asyncio.create_task(worker.run())
    await eventually(started.is_set, what="the handler")
    worker.stop()
    await asyncio.wait_for(task, timeout=10)
    assert reports(double) == {"t-sync": ("exception", "worker-shutdown")}


async def test_claim_work_mode_needs_no_azure(double: CoordinatorDouble) -> None:
    for n in range(4):
        double.add_task(f"t{n}", hint=False)
    release = asyncio.Event()

    async def handle(run: TaskRun) -> None:
        await release.wait()

    async with running(make_worker(double, handle, capacity=3, claim_work=True)):
        await eventually(lambda: len(double.routes("claimWork")) >= 1, what="a claimWork")
        await eventually(
            lambda: sum(r.state == "running" for t in double.tasks.values() for r in t.runs) == 3,
            what="three running",
        )
        release.set()
        await eventually(lambda: len(double.reports) == 4, what="four reports")
    assert double.routes("claimWork")[0] == "3"
    assert double.routes("pollTaskUrls") == double.routes("getMessages") == []
    assert {kind for _, _, kind, _ in double.reports} == {"completed"}


async def test_a_claim_that_arrives_during_shutdown_is_handed_back(
    double: CoordinatorDouble,
) -> None:
    double.add_task("t-late")
    double.claim_gate = asyncio.Event()
    handled: list[str] = []

    async def handle(run: TaskRun) -> None:
        handled.append(run.task_id)

    worker = make_worker(double, handle, grace_period=10)
    task = asyncio.create_task(worker.run())
    await eventually(lambda: len(double.routes("claimRuns")) == 1, what="a claim in flight")
    worker.stop()
    double.claim_gate.set()
    await asyncio.wait_for(task, timeout=10)
    assert handled == []
    assert reports(double) == {"t-late": ("exception", "worker-shutdown")}


async def test_stopping_hangs_up_on_a_claim_work_long_poll(double: CoordinatorDouble) -> None:
    double.claim_work_wait = 30.0
    worker = make_worker(double, lambda run: None, claim_work=True, grace_period=30)
    task = asyncio.create_task(worker.run())
    await eventually(lambda: len(double.routes("claimWork")) == 1, what="a long poll")
    stopped_at = time.monotonic()
    worker.stop()
    await asyncio.wait_for(task, timeout=10)
    assert time.monotonic() - stopped_at < 2, "did not wait for the long poll to end"
    await eventually(lambda: double.routes("claimWorkHungUp") == ["1"], what="the hang-up")


async def test_a_worker_the_coordinator_refuses_stops_with_the_error(
    double: CoordinatorDouble,
) -> None:
    double.faults["pollTaskUrls"] = [403]
    worker = make_worker(double, lambda run: None)
    with pytest.raises(RequestFailed) as failure:
        await asyncio.wait_for(worker.run(), timeout=10)
    assert failure.value.status == 403


@MODES
async def test_without_credentials_only_single_reclaims_and_reports_are_signed(
    double: CoordinatorDouble, batches: bool
) -> None:
    """Polling, claims and batches go unsigned; single reports use the run's credentials."""
    route(double, batches, "completed")
    double.credentials = None
    double.add_task("t1")

    async with running(make_worker(double, lambda run: None, credentials=None, run_log=False)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert [name for name, _ in double.signers] == ([] if batches else ["completed"])


async def test_a_duplicate_claim_answered_after_its_run_finished_does_not_run_it_again(
    double: CoordinatorDouble,
) -> None:
    """Two hints of one run: both claims are answered 200 (the same worker's repeat), the
    second only once the run has finished and been reported, as an answer held up on its
    way back. The handler runs once."""
    double.batch_routes = True
    double.add_task("t0", priority="highest")
    double.put("highest", hint_text("t0", 0))
    double.late_claim_answers = asyncio.Event()
    handled: list[str] = []

    async def handle(run: TaskRun) -> None:
        # the second claim is made while the run goes on
        await eventually(lambda: len(double.routes("claimRuns")) == 2, what="the second claim")
        handled.append(run.task_id)

    async with running(make_worker(double, handle, capacity=2)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
        gets = double.gets("highest")
        double.late_claim_answers.set()
        # both poll loops have asked again since: the late answer was dealt with
        await eventually(lambda: double.gets("highest") >= gets + 2, what="polling going on")
    assert handled == ["t0"]
    assert reports(double) == {"t0": ("completed", None)}
