"""Batching and the empty-queue skip of the worker SDK: the client's reading of batch answers,
then against the coordinator test double (tests/fixtures/coordinator_double.py), which counts every
request and refuses single runs of a batch on cue, and against the real coordinator on
Azurite, whose ``/metrics`` count the requests per API method.

The claim, reclaim and report paths themselves, batched and single, are tested in
tests/integration/test_sdk_worker.py. Tests of how one get's runs are batched poll with
``polls_in_flight=1``: with two polls, which of them gets which hints is a race.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from devharness.waiting import wait_until
from hawk_signing import Credentials
from tests.fixtures.coordinator_double import BATCH_ROUTES, CoordinatorDouble, eventually, hint_text
from tests.fixtures.sdk import (
    MakeSetup,
    last_run,
    make_worker,
    renewed,
    reports,
    run_until,
    running,
)
from worker_sdk import RequestFailed, TaskRun
from worker_sdk.batches import RunBatches
from worker_sdk.client import MAX_BATCH_RUNS, CoordinatorClient, Resolution, RunReport
from worker_sdk.priorities import Polling

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

RENEWED_CLAIM_S = 3.0
"""The claim timeout of the tests that watch runs renewed. The worker counts a claim from
the answer's whole-second ``Date`` less a second and reclaims at two thirds of that, so a
reclaim has at least a third of 2 s to answer; with 1.5 s it had 167 ms, which a loaded
machine can miss (the claim is then given up)."""

# -- the client's reading of batch answers --------------------------------------------------


@contextlib.asynccontextmanager
async def client_of(routes: Mapping[str, Handler]) -> AsyncIterator[CoordinatorClient]:
    """A client of a server answering POSTs to ``/api/queue/v1`` + each route's path."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_post("/api/queue/v1" + path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        async with aiohttp.ClientSession() as session:
            yield CoordinatorClient(
                session=session, root_url=f"http://{host}:{port}", credentials=None
            )
    finally:
        await runner.cleanup()


async def test_each_run_gets_its_own_answer_and_a_malformed_item_fails_only_its_run() -> None:
    answers: list[object] = []

    async def answer(request: web.Request) -> web.Response:
        return web.json_response(answers.pop(0))

    async with client_of({"/reclaim-runs": answer, "/resolve-runs": answer}) as client:
        answers.append(
            {
                "reclaims": [
                    {
                        "status": {"taskId": "a"},
                        "runId": 0,
                        "takenUntil": "2030-01-01T00:00:00.000Z",
                        "credentials": {"clientId": "c", "accessToken": "t"},
                    }
                ]
            }
        )
        [reclaim] = await client.reclaim_runs([("a", 0)])
        assert not isinstance(reclaim, RequestFailed)
        assert (reclaim.credentials.client_id, reclaim.taken_until.year) == ("c", 2030)

        reports = [
            RunReport(task_id=task_id, run_id=0, resolution=Resolution(kind="completed"))
            for task_id in ("a", "b", "c", "d", "e")
        ]
        conflict = {"status": 409, "code": "RequestConflict", "message": "run is completed"}
        answers.append(
            {
                "reports": [
                    {"taskId": "a", "runId": 0, "status": {"state": "completed"}},
                    {"taskId": "b", "runId": 0, "error": conflict},
                    {"taskId": "x", "runId": 0, "status": {}},  # another run's answer
                    {"taskId": "d", "runId": 0, "error": {**conflict, "status": "409"}},
                    "not an item",
                ]
            }
        )
        done, refused, *malformed = await client.resolve_runs(reports)
        assert done is None
        assert isinstance(refused, RequestFailed)
        assert (refused.status, refused.code, refused.message) == (
            409,
            "RequestConflict",
            "run is completed",
        )
        for failure in malformed:
            assert isinstance(failure, RequestFailed)
            assert failure.code == "InvalidResponse" and failure.transient

        answers.append({"reports": []})
        with pytest.raises(RequestFailed) as whole:
            await client.resolve_runs(reports)
        assert whole.value.code == "InvalidResponse" and whole.value.transient


# -- against the double --------------------------------------------------------------------


def runs_of(detail: str) -> set[str]:
    """The runs a batch request named (see :meth:`CoordinatorDouble.routes`)."""
    return set(detail.split(","))


async def test_the_runs_of_one_azure_get_are_claimed_in_one_request(
    double: CoordinatorDouble,
) -> None:
    task_ids = [f"t{n}" for n in range(5)]
    for task_id in task_ids:
        double.add_task(task_id)
    double.put("lowest", hint_text("t0", 0))  # a second hint of t0's run
    release = asyncio.Event()
    started: set[str] = set()

    async def handle(run: TaskRun) -> None:
        started.add(run.task_id)
        await release.wait()

    async with running(make_worker(double, handle, capacity=6, polls_in_flight=1)):
        await eventually(lambda: started == set(task_ids), what="five runs")
        await eventually(lambda: len(double.deleted) == 6, what="every hint deleted")
        release.set()
        await eventually(lambda: len(double.reports) == 5, what="five reports")
    assert double.routes("claimRuns") == [",".join(f"{t}/0" for t in task_ids)], "t0 once"
    assert double.routes("claimTask") == []


async def test_reclaims_and_reports_of_runs_claimed_together_share_requests(
    double: CoordinatorDouble,
) -> None:
    """Runs claimed in one request come due for reclaiming at the same moment; released
    together, they end within the batch window of each other."""
    double.claim_timeout_s = RENEWED_CLAIM_S
    task_ids = [f"t{n}" for n in range(8)]
    for task_id in task_ids:
        double.add_task(task_id)
    release = asyncio.Event()

    async def handle(run: TaskRun) -> None:
        await release.wait()

    async with running(make_worker(double, handle, capacity=8, polls_in_flight=1, run_log=False)):
        await eventually(
            lambda: all(double.run(t).reclaims >= 1 for t in task_ids), what="eight reclaims"
        )
        release.set()
        await eventually(lambda: len(double.reports) == 8, what="eight reports")
    assert reports(double) == {t: ("completed", None) for t in task_ids}
    assert len(double.routes("claimRuns")) == 1
    assert runs_of(double.routes("reclaimRuns")[0]) == {f"{t}/0" for t in task_ids}
    assert len(double.routes("resolveRuns")) < len(task_ids)
    assert double.routes("reclaimTask") == double.routes("completed") == []


async def test_a_run_refused_its_reclaim_in_a_batch_loses_only_its_own_claim(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    double.claim_timeout_s = RENEWED_CLAIM_S
    double.add_task("t-lost")
    double.add_task("t-kept")
    double.faults["reclaimRuns:t-lost/0"] = [409]
    cancelled = asyncio.Event()

    async def handle(run: TaskRun) -> None:
        if run.task_id == "t-kept":
            await renewed(run, 2)
            return
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async with running(make_worker(double, handle, capacity=2, polls_in_flight=1)):
        await asyncio.wait_for(cancelled.wait(), timeout=10)
        await eventually(lambda: len(double.reports) == 1, what="t-kept's report")
    assert runs_of(double.routes("reclaimRuns")[0]) == {"t-lost/0", "t-kept/0"}
    assert reports(double) == {"t-kept": ("completed", None)}
    assert "claim lost taskId=t-lost runId=0" in caplog.text
    assert "claim lost taskId=t-kept" not in caplog.text


async def test_a_task_deleted_while_it_ran_is_forgotten_when_its_batched_report_gets_404(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    double.add_task("t-gone")
    double.add_task("t-ok")
    release = asyncio.Event()
    started: set[str] = set()

    async def handle(run: TaskRun) -> None:
        started.add(run.task_id)
        await release.wait()

    # No run log: t-gone's upload would get its 404 sooner than t-ok's upload succeeds, and
    # on a loaded machine the two reports then fall into different batches.
    worker = make_worker(double, handle, capacity=2, polls_in_flight=1, run_log=False)
    async with running(worker):
        await eventually(lambda: started == {"t-gone", "t-ok"}, what="both runs")
        del double.tasks["t-gone"]  # as deleteTasks would
        release.set()
        await eventually(lambda: "task deleted while it ran" in caplog.text, what="the warning")
        await eventually(lambda: len(double.reports) == 1, what="t-ok's report")
    assert [runs_of(detail) for detail in double.routes("resolveRuns")] == [{"t-gone/0", "t-ok/0"}]
    assert reports(double) == {"t-ok": ("completed", None)}
    [line] = [r for r in caplog.records if r.getMessage().startswith("task deleted while")]
    assert line.getMessage() == (
        "task deleted while it ran, run forgotten taskId=t-gone runId=0 outcome=completed"
    )
    assert double.routes("completed") == [], "a 404 is the answer, not a reason to ask again"


async def test_a_run_a_batch_refuses_is_reclaimed_singly_with_its_own_credentials(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's client may lack the worker-id scope that batches of reclaims need; the
    run's temporary credentials always carry the run's own scope."""
    double.claim_timeout_s = RENEWED_CLAIM_S
    double.add_task("t1")
    double.faults["reclaimRuns:t1/0"] = [403]

    async def handle(run: TaskRun) -> None:
        await renewed(run, 2)

    async with running(make_worker(double, handle)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert reports(double) == {"t1": ("completed", None)}
    assert double.routes("reclaimTask") == ["t1/0"], "only the refused one went singly"
    assert len(double.routes("reclaimRuns")) == 2, "the next reclaim is batched again"
    assert ("reclaimTask", "task-client/t1/0/0") in double.signers
    assert (
        "run refused in a batch, sent singly route=reclaimRuns taskId=t1 runId=0 status=403"
        in caplog.text
    )


async def test_transient_failures_of_a_whole_batch_are_retried_for_every_run_in_it(
    double: CoordinatorDouble,
) -> None:
    task_ids = [f"t{n}" for n in range(4)]
    for task_id in task_ids:
        double.add_task(task_id)
    double.faults["claimRuns"] = [503]
    double.faults["resolveRuns"] = [503, 0]
    release = asyncio.Event()

    async def handle(run: TaskRun) -> None:
        await release.wait()

    # No run log: the four reports are ready on the same wake-up, one batch (see below).
    async with running(make_worker(double, handle, capacity=4, polls_in_flight=1, run_log=False)):
        await eventually(lambda: len(double.deleted) == 4, what="four claims")
        release.set()
        await eventually(lambda: len(double.reports) == 4, what="four reports")
    assert reports(double) == {t: ("completed", None) for t in task_ids}
    everything = ",".join(f"{t}/0" for t in task_ids)
    assert double.routes("claimRuns") == [everything] * 2, "one retry for all four"
    sent = double.routes("resolveRuns")
    assert len(sent) > 2 and runs_of(sent[0]) == set(everything.split(","))
    assert set().union(*map(runs_of, sent[2:])) == runs_of(everything), "every run retried"


async def test_a_coordinator_without_batch_routes_is_asked_once_per_route(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    double.batch_routes = False
    double.claim_timeout_s = RENEWED_CLAIM_S
    for n in range(3):
        double.add_task(f"t{n}")

    async def handle(run: TaskRun) -> None:
        await renewed(run, 2)

    async with running(make_worker(double, handle, capacity=3, polls_in_flight=1)):
        await eventually(lambda: len(double.reports) == 3, within=15, what="three reports")
        double.add_task("t-later")
        await eventually(lambda: len(double.reports) == 4, within=15, what="the fourth")
    assert [len(double.routes(name)) for name in BATCH_ROUTES] == [1, 1, 1]
    assert len(double.routes("claimTask")) == 4
    assert len(double.routes("reclaimTask")) >= 6
    assert len(double.routes("completed")) == 4
    for name in BATCH_ROUTES:
        assert caplog.text.count(f"coordinator lacks {name}") == 1


async def test_a_claim_batch_rejected_as_a_whole_is_claimed_singly(
    double: CoordinatorDouble,
) -> None:
    """A 400 for the whole batch (a hint the coordinator's input checks reject) must not
    cost the other hints their runs; the next get is batched again."""
    double.add_task("t0")
    double.add_task("t1")
    double.faults["claimRuns"] = [400]

    async with running(make_worker(double, lambda run: None, capacity=2, polls_in_flight=1)):
        await eventually(lambda: len(double.reports) == 2, what="two reports")
        double.add_task("t2")
        await eventually(lambda: len(double.reports) == 3, what="the third")
    assert double.routes("claimRuns") == ["t0/0,t1/0", "t2/0"]
    assert sorted(double.routes("claimTask")) == ["t0/0", "t1/0"]


async def test_without_batching_every_step_is_its_own_request(double: CoordinatorDouble) -> None:
    double.claim_timeout_s = RENEWED_CLAIM_S
    double.add_task("t0")
    double.add_task("t1")

    async def handle(run: TaskRun) -> None:
        await renewed(run, 1)

    async with running(make_worker(double, handle, capacity=2, batching=False)):
        await eventually(lambda: len(double.reports) == 2, what="two reports")
    assert [double.routes(name) for name in BATCH_ROUTES] == [[], [], []]
    assert sorted(double.routes("claimTask")) == sorted(double.routes("completed"))
    assert len(double.routes("claimTask")) == 2 and len(double.routes("reclaimTask")) >= 2


@pytest.mark.parametrize("polling", ["strict", "weighted"])
async def test_empty_higher_queues_are_skipped_while_the_lowest_has_work(
    double: CoordinatorDouble, polling: Polling
) -> None:
    """Work only in the lowest priority: the empty higher queues are polled about once a
    second rather than every pass; new work in one of them is taken by its queue's next get."""
    double.keep_full = {"lowest"}
    double.add_task("t-low")
    urgent_seen: list[str] = []

    def handle(run: TaskRun) -> None:
        if run.task_id == "t-urgent":
            urgent_seen.append(run.task_id)

    async with running(make_worker(double, handle, polling=polling)):
        await eventually(lambda: double.gets("lowest") >= 40, what="40 polls of lowest")
        highest_gets = double.gets("highest")
        double.add_task("t-urgent", priority="highest")
        await eventually(lambda: bool(urgent_seen), within=10, what="the urgent run")
    # A skip delays a queue's next get and never passes work by. Counted in requests rather
    # than timed: on a loaded machine a pass alone has taken a second.
    claimed = next(
        index
        for index, (route, detail) in enumerate(double.requests)
        if route in ("claimRuns", "claimTask") and "t-urgent/0" in detail.split(",")
    )
    gets_before = [
        detail
        for route, detail in double.requests[:claimed]
        if route == "getMessages" and detail.startswith("highest:")
    ]
    assert len(gets_before) == highest_gets + 1
    for priority in ("highest", "very-high", "high", "medium", "low", "very-low"):
        assert double.gets(priority) * 4 < double.gets("lowest"), priority


async def test_an_empty_queue_skip_of_0_polls_every_queue_each_pass(
    double: CoordinatorDouble,
) -> None:
    double.keep_full = {"lowest"}
    double.add_task("t-low")

    async with running(make_worker(double, lambda run: None, empty_queue_skip=0)):
        await eventually(lambda: double.gets("lowest") >= 20, what="20 polls of lowest")
    assert double.gets("highest") >= double.gets("lowest")


@pytest.mark.parametrize("skip", [-1, math.inf, math.nan])
async def test_a_worker_refuses_a_negative_or_endless_empty_queue_skip(
    double: CoordinatorDouble, skip: float
) -> None:
    # an endless skip would never poll a queue again once it answered empty
    with pytest.raises(ValueError, match="empty_queue_skip must be finite and not negative"):
        make_worker(double, lambda run: None, empty_queue_skip=skip)


# -- against the real coordinator ----------------------------------------------------------


async def requests_served(root_url: str) -> dict[str, float]:
    """``http_requests_total`` of the coordinator's ``/metrics``, by API method name,
    counting only answers of 2xx."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(root_url + "/metrics") as response,
    ):
        assert response.status == 200
        text = await response.text()
    served: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "http_requests_total" and sample.labels["status"].startswith("2"):
                name = sample.labels["name"]
                served[name] = served.get(name, 0.0) + sample.value
    return served


@pytest.mark.parametrize("batching", [True, False], ids=["batching", "no-batching"])
async def test_a_real_worker_claims_reclaims_and_reports_through_the_batch_routes(
    setup: MakeSetup, batching: bool
) -> None:
    """Twelve runs claimed from one Azure get, reclaimed together, released together."""
    # 12 s claims, reclaimed after 8: under a loaded suite a 3 s claim expired once before its
    # reclaim was answered, and a 6 s one once with all twelve reclaims in flight
    s = await setup(claim_timeout_ms=12_000)
    task_ids = [await s.create() for _ in range(12)]
    handled: list[str] = []
    reclaimed: set[str] = set()
    release = asyncio.Event()

    async def handle(run: TaskRun) -> None:
        handled.append(run.task_id)
        first = run.credentials.access_token
        await wait_until(lambda: run.credentials.access_token != first, what="a reclaim")
        reclaimed.add(run.task_id)
        await release.wait()

    async def done() -> None:
        await wait_until(lambda: len(reclaimed) == len(task_ids), what="every run reclaimed")
        release.set()
        await s.resolved(*task_ids)

    await run_until(s.worker(handle, capacity=len(task_ids), batching=batching), done)
    for task_id in task_ids:
        status = await s.status(task_id)
        assert len(status["runs"]) == 1, "claimed once, never retried"
        assert last_run(status) == ("completed", "completed")
    assert sorted(handled) == sorted(task_ids), "each run handled once"
    served = await requests_served(s.root_url)
    batched = [served.get(name, 0) for name in BATCH_ROUTES]
    claims, reclaims, reports_ = (
        served.get(name, 0) for name in ("claimTask", "reclaimTask", "reportCompleted")
    )
    if batching:
        assert (claims, reclaims, reports_) == (0, 0, 0)
        assert all(1 <= count < len(task_ids) for count in batched), batched
    else:
        assert batched == [0, 0, 0], "a worker without batching never asks"
        assert claims == reports_ == len(task_ids)
        assert reclaims >= len(task_ids)


async def test_batches_waiting_when_the_route_turns_out_missing_cost_it_one_request() -> None:
    """Two full batches go out at once; until the coordinator has answered one, the second
    waits, and then goes singly without asking the missing route again."""
    asked: list[str] = []

    async def missing(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.json_response({"code": "ResourceNotFound", "message": "no"}, status=404)

    async def single(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.json_response({"status": {"taskId": request.match_info["task_id"]}})

    routes = {"/resolve-runs": missing, "/task/{task_id}/runs/0/completed": single}
    async with client_of(routes) as client:
        batches = RunBatches(client=client, enabled=True)
        run_credentials = Credentials(client_id="run", access_token="t")
        await asyncio.gather(
            *(
                batches.report(
                    f"t{n}", 0, Resolution(kind="completed"), credentials=run_credentials
                )
                for n in range(2 * MAX_BATCH_RUNS)
            )
        )
        await batches.aclose()

    assert asked.count("/api/queue/v1/resolve-runs") == 1
    assert len([path for path in asked if path.endswith("/completed")]) == 2 * MAX_BATCH_RUNS
