"""Operator controls of a task queue on both drivers, against coordinators in this process:
pauseTaskQueue and resumeTaskQueue, setTaskQueueLimits (``maxRunning``, and
``maxClaimsPerSecond`` on an injected clock), the 429 with ``Retry-After`` of claimTask and
the per-run 429 of claimRuns, getTaskQueue and listTaskQueues showing them, a second replica
applying a pause within about a second, rerunTasks, the metrics, bad input and scopes.

Workers under a paused or limited queue are in tests/e2e/test_queue_controls_e2e.py.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from coordinator.domain.records import from_iso
from coordinator.resolvers import expiry_sweeper
from coordinator.service import management
from coordinator.service.clock import wall_clock
from devharness.api import call
from devharness.waiting import wait_until
from hawk_signing import Credentials
from tests.fixtures.clients import write_clients
from tests.fixtures.coordinator import FakeClock, RunningCoordinator, StartCoordinator
from tests.fixtures.flow import WT, Flow

QUEUE = "proj/wt"
QUEUE_PATH = "/task-queues/" + urllib.parse.quote(QUEUE, safe="")


async def claim_answer(
    c: RunningCoordinator, task_id: str, worker_id: str = "w1"
) -> tuple[int, str | None, Any]:
    """claimTask's status, ``Retry-After`` header and body."""
    url = f"{c.api}/task/{task_id}/runs/0/claim"
    async with c.session.post(url, json={"workerGroup": "wg", "workerId": worker_id}) as response:
        return response.status, response.headers.get("Retry-After"), await response.json()


async def claim_runs(c: RunningCoordinator, task_ids: list[str]) -> list[dict[str, Any]]:
    body = {
        "workerGroup": "wg",
        "workerId": "w1",
        "runs": [{"taskId": task_id, "runId": 0} for task_id in task_ids],
    }
    claims: list[dict[str, Any]] = (await c.ok("POST", "/claim-runs", body))["claims"]
    return claims


async def metric(c: RunningCoordinator, line_start: str) -> float | None:
    async with c.session.get(c.url + "/metrics") as response:
        for line in (await response.text()).splitlines():
            if line.startswith(line_start + " "):
                return float(line.split()[-1])
    return None


PAUSED_METRIC = 'queue_paused{provisionerId="proj",workerType="wt"}'
LIMITED_METRIC = 'queue_limited_claims_total{provisionerId="proj",workerType="wt"}'


async def test_a_paused_queue_keeps_its_tasks_pending_until_resumed(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    c = await start_coordinator(store_url=store_url, run_resolvers=False)
    paused = await c.ok("POST", QUEUE_PATH + "/pause", {"reason": "incident 42"})
    assert paused["taskQueueId"] == QUEUE
    assert paused["paused"]["reason"] == "incident 42"
    assert paused["limits"] == {
        "maxRunning": None,
        "maxClaimsPerSecond": None,
        "maxRunningPerKey": None,
    }
    since = paused["paused"]["since"]

    first, second = await c.create_many(2, provisionerId="proj", workerType="wt")
    status, retry_after, body = await claim_answer(c, first)
    assert (status, retry_after, body["code"]) == (429, "5", "TooManyRequests")
    assert "paused" in body["message"] and "incident 42" in body["message"]
    [refused] = await claim_runs(c, [second])
    assert refused["error"]["status"] == 429
    assert refused["error"]["retryAfter"] == 5
    assert (await c.status(first))["state"] == "pending"

    queue = await c.ok("GET", QUEUE_PATH)
    assert queue["paused"] == {"since": since, "reason": "incident 42"}
    listed = {q["taskQueueId"]: q for q in (await c.ok("GET", "/task-queues"))["taskQueues"]}
    assert listed[QUEUE]["paused"]["reason"] == "incident 42"
    assert await metric(c, PAUSED_METRIC) == 1
    assert await metric(c, LIMITED_METRIC) == 2

    again = await c.ok("POST", QUEUE_PATH + "/pause", {"reason": "still"})
    assert again["paused"] == {"since": since, "reason": "still"}

    resumed = await c.ok("POST", QUEUE_PATH + "/resume")
    assert "paused" not in resumed
    assert "paused" not in await c.ok("GET", QUEUE_PATH)
    assert (await c.claim(first))["status"]["state"] == "running"
    [claimed] = await claim_runs(c, [second])
    assert claimed["status"]["state"] == "running"
    assert await metric(c, PAUSED_METRIC) == 0


async def test_max_running_lets_claims_through_up_to_the_limit(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    c = await start_coordinator(store_url=store_url, run_resolvers=False)
    limited = await c.ok("PUT", QUEUE_PATH + "/limits", {"maxRunning": 2})
    assert limited["limits"] == {
        "maxRunning": 2,
        "maxClaimsPerSecond": None,
        "maxRunningPerKey": None,
    }
    tasks = await c.create_many(4, provisionerId="proj", workerType="wt")

    answers = await claim_runs(c, tasks[:3])
    assert ["error" in answer for answer in answers] == [False, False, True]
    assert answers[2]["error"]["status"] == 429
    assert "maxRunning is 2" in answers[2]["error"]["message"]
    status, retry_after, _ = await claim_answer(c, tasks[3])
    assert (status, retry_after) == (429, "1")
    assert (await c.ok("GET", QUEUE_PATH))["limits"]["maxRunning"] == 2

    await c.report(tasks[0], 0, "completed")
    assert (await c.claim(tasks[3]))["status"]["state"] == "running"

    # a body naming one limit leaves the other; null lifts one
    both = await c.ok("PUT", QUEUE_PATH + "/limits", {"maxClaimsPerSecond": 50})
    assert both["limits"] == {"maxRunning": 2, "maxClaimsPerSecond": 50, "maxRunningPerKey": None}
    lifted = await c.ok(
        "PUT", QUEUE_PATH + "/limits", {"maxRunning": None, "maxClaimsPerSecond": None}
    )
    assert lifted["limits"] == {
        "maxRunning": None,
        "maxClaimsPerSecond": None,
        "maxRunningPerKey": None,
    }
    assert "limits" not in await c.ok("GET", QUEUE_PATH)
    assert (await c.claim(tasks[2]))["status"]["state"] == "running"


async def test_max_claims_per_second_spaces_claims_on_the_clock(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    clock = FakeClock()
    c = await start_coordinator(store_url=store_url, run_resolvers=False, clock=clock)
    await c.ok("PUT", QUEUE_PATH + "/limits", {"maxClaimsPerSecond": 2})
    tasks = await c.create_many(5, provisionerId="proj", workerType="wt")
    # a burst of one claim (half a second's worth), then one every 500 ms
    assert (await claim_answer(c, tasks[0]))[0] == 200
    status, retry_after, body = await claim_answer(c, tasks[1])
    assert (status, retry_after) == (429, "1")
    assert "2 claims a second" in body["message"]
    clock.advance(0.5)
    answers = await claim_runs(c, tasks[1:3])
    assert ["error" in answer for answer in answers] == [False, True]
    clock.advance(10)  # idle time does not add up beyond the burst
    answers = await claim_runs(c, tasks[2:4])
    assert ["error" in answer for answer in answers] == [False, True]
    # a claim that got nothing (a run no longer pending) gives its room back
    clock.advance(0.5)
    assert (await claim_answer(c, tasks[0], "w2"))[0] == 409
    assert (await claim_answer(c, tasks[3]))[0] == 200
    assert (await claim_answer(c, tasks[4]))[0] == 429


async def test_a_second_replica_applies_a_pause_within_a_second(
    start_coordinator: StartCoordinator, postgres_schema_url: str
) -> None:
    a = await start_coordinator(store_url=postgres_schema_url)
    b = await start_coordinator(store_url=postgres_schema_url)
    task_id = await a.create(provisionerId="proj", workerType="wt")
    await a.ok("POST", QUEUE_PATH + "/pause", {"reason": "maintenance"})

    async def refused_by_b() -> bool:
        return (await claim_answer(b, task_id))[0] == 429

    await wait_until(refused_by_b, within=5, what="replica b refuses claims of the paused queue")
    await a.ok("POST", QUEUE_PATH + "/resume")

    async def claimed_through_b() -> bool:
        return (await claim_answer(b, task_id))[0] == 200

    await wait_until(claimed_through_b, within=5, what="replica b claims again after resume")


async def test_a_second_replica_applies_a_default_claim_timeout_within_a_second(
    start_coordinator: StartCoordinator, postgres_schema_url: str
) -> None:
    a = await start_coordinator(store_url=postgres_schema_url)
    b = await start_coordinator(store_url=postgres_schema_url)
    await a.ok("PUT", QUEUE_PATH + "/defaults", {"claimTimeout": 30})

    async def claimed_for_30_s_by_b() -> bool:
        claim = await b.claim(await a.create(provisionerId="proj", workerType="wt"))
        return from_iso(claim["takenUntil"]) - wall_clock() <= 30_000

    await wait_until(claimed_for_30_s_by_b, within=5, what="replica b's claims last 30 s")
    await a.ok("PUT", QUEUE_PATH + "/defaults", {"claimTimeout": None})

    async def claimed_for_longer_by_b() -> bool:
        return not await claimed_for_30_s_by_b()

    await wait_until(claimed_for_longer_by_b, within=5, what="replica b's own default again")


async def test_rerun_tasks_reruns_the_failed_and_exception_matches(
    start_coordinator: StartCoordinator, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(management, "CANCEL_BATCH", 2)  # several batches
    c = await start_coordinator(store_url=store_url, run_resolvers=False)
    tasks = await c.create_many(6, provisionerId="proj", workerType="wt", retries=0)
    other = await c.create(provisionerId="proj", workerType="other", retries=0)
    outcomes = ["failed", "failed", "exception", "completed", "failed"]
    for task_id, outcome in zip([*tasks[:4], other], outcomes, strict=True):
        await c.claim(task_id)
        await c.report(task_id, 0, outcome, "malformed-payload")

    query = "?taskQueueId=" + urllib.parse.quote(QUEUE, safe="")
    assert await c.ok("POST", "/tasks/rerun" + query) == {"rerun": 3, "matched": 3}
    for task_id in tasks[:3]:
        runs = (await c.status(task_id))["runs"]
        assert [(r["state"], r["reasonCreated"]) for r in runs][-1] == ("pending", "rerun")
    assert (await c.status(tasks[3]))["state"] == "completed"
    assert (await c.status(tasks[4]))["state"] == "pending"  # never ran: left alone
    assert (await c.status(other))["state"] == "failed"  # another queue
    # only failed ones, of any queue; nothing left to rerun among the first three
    assert await c.ok("POST", "/tasks/rerun?state=failed") == {"rerun": 1, "matched": 1}
    assert await c.ok("POST", "/tasks/rerun?state=completed") == {"rerun": 0, "matched": 0}


async def test_a_queues_default_claim_timeout_holds_for_tasks_without_their_own(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    clock = FakeClock()
    c = await start_coordinator(store_url=store_url, run_resolvers=False, clock=clock)
    answer = await c.ok("PUT", QUEUE_PATH + "/defaults", {"claimTimeout": 60})
    assert answer["defaults"] == {"claimTimeout": 60, "completedTTL": None, "failedTTL": None}
    assert "paused" not in answer and answer["limits"]["maxRunning"] is None
    plain = await c.create(provisionerId="proj", workerType="wt")
    assert (await c.ok("GET", QUEUE_PATH))["defaults"]["claimTimeout"] == 60
    own = await c.create(provisionerId="proj", workerType="wt", claimTimeout=120)
    elsewhere = await c.create(provisionerId="proj", workerType="other")

    def lasts(claim: dict[str, Any]) -> int:
        return from_iso(claim["takenUntil"]) - clock.now

    assert lasts(await c.claim(plain)) == 60_000
    assert lasts(await c.claim(own)) == 120_000
    assert lasts(await c.claim(elsewhere)) == 1_200_000  # the coordinator's
    reclaimed = await c.ok("POST", f"/task/{plain}/runs/0/reclaim")
    assert lasts(reclaimed) == 60_000
    # a body naming one default leaves the others; null goes back to the coordinator's
    await c.ok("PUT", QUEUE_PATH + "/defaults", {"failedTTL": 600})
    back = await c.ok("PUT", QUEUE_PATH + "/defaults", {"claimTimeout": None})
    assert back["defaults"] == {"claimTimeout": None, "completedTTL": None, "failedTTL": 600}
    assert lasts(await c.ok("POST", f"/task/{plain}/runs/0/reclaim")) == 1_200_000


async def test_a_queues_ttls_replace_the_coordinators_for_its_tasks(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    clock = FakeClock()
    c = await start_coordinator(
        store_url=store_url, run_resolvers=False, clock=clock, completed_ttl_ms=60_000
    )
    await c.ok("PUT", QUEUE_PATH + "/defaults", {"completedTTL": 3600, "failedTTL": 0})
    kept, failed = await c.create_many(2, provisionerId="proj", workerType="wt")
    elsewhere = await c.create(provisionerId="proj", workerType="other")
    for task_id, outcome in ((kept, "completed"), (failed, "failed"), (elsewhere, "completed")):
        await c.claim(task_id)
        await c.report(task_id, 0, outcome)

    async def present() -> set[str]:
        found = await c.ok("GET", "/tasks?state=completed&state=failed")
        return {item["status"]["taskId"] for item in found["tasks"]}

    management = c.parts.management
    assert await expiry_sweeper.run_once(management) == 1  # failedTTL 0: at once
    assert await present() == {kept, elsewhere}
    clock.advance(60)  # the coordinator's completed TTL: the other queue's task only
    assert await expiry_sweeper.run_once(management) == 1
    assert await present() == {kept}
    clock.advance(3600 - 60)
    assert await expiry_sweeper.run_once(management) == 1
    assert await present() == set()


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("PUT", QUEUE_PATH + "/limits", {"maxRunning": -1}, "maxRunning"),
        ("PUT", QUEUE_PATH + "/limits", {"maxClaimsPerSecond": 0}, "maxClaimsPerSecond"),
        ("PUT", QUEUE_PATH + "/limits", {"maxClaimsPerSecond": -2.5}, "maxClaimsPerSecond"),
        ("PUT", QUEUE_PATH + "/limits", {"maxRunning": "3"}, "maxRunning"),
        ("PUT", QUEUE_PATH + "/limits", {"maxWaiting": 3}, "maxWaiting"),
        ("POST", QUEUE_PATH + "/pause", {}, "reason"),
        ("POST", "/task-queues/not-a-queue/pause", {"reason": "x"}, "taskQueueId"),
        ("POST", "/tasks/rerun", None, "filter"),
        ("PUT", QUEUE_PATH + "/defaults", {"claimTimeout": -1}, "claimTimeout"),
        ("PUT", QUEUE_PATH + "/defaults", {"claimTimeout": 29}, "claimTimeout"),
        ("PUT", QUEUE_PATH + "/defaults", {"completedTTL": -60}, "completedTTL"),
        ("PUT", QUEUE_PATH + "/defaults", {"failedTTL": 1.5}, "failedTTL"),
        ("PUT", QUEUE_PATH + "/defaults", {"runningTTL": 60}, "runningTTL"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    start_coordinator: StartCoordinator,
    method: str,
    path: str,
    body: Any,
    field: str,
) -> None:
    c = await start_coordinator(run_resolvers=False)
    response = await c.call(method, path, body)
    assert response.status == 400, response.body
    assert field in response.body["message"], response.body


async def test_each_control_needs_its_scope(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    path = tmp_path / "clients.json"
    credentials = write_clients(
        path,
        {
            "nobody": [],
            "operator": [
                "queue:manage:pause:proj/*",
                "queue:manage:limits:proj/*",
                "queue:manage:defaults:proj/*",
                "queue:manage:rerun-tasks",
            ],
        },
    )
    c = await start_coordinator(auth_enabled=True, clients_file=path, run_resolvers=False)
    nobody, operator = (Credentials.from_json(credentials[name]) for name in ("nobody", "operator"))
    calls = [
        ("POST", QUEUE_PATH + "/pause", {"reason": "x"}, "queue:manage:pause:proj/wt"),
        ("POST", QUEUE_PATH + "/resume", None, "queue:manage:pause:proj/wt"),
        ("PUT", QUEUE_PATH + "/limits", {"maxRunning": 1}, "queue:manage:limits:proj/wt"),
        ("PUT", QUEUE_PATH + "/defaults", {"failedTTL": 9}, "queue:manage:defaults:proj/wt"),
        ("POST", "/tasks/rerun?state=failed", None, "queue:manage:rerun-tasks"),
    ]
    for method, route, body, scope in calls:
        refused = await call(c.session, method, c.api + route, body, credentials=nobody)
        assert refused.status == 403, (route, refused.body)
        assert scope in refused.body["message"]
        allowed = await call(c.session, method, c.api + route, body, credentials=operator)
        assert allowed.status == 200, (route, allowed.body)
    other_queue = await call(
        c.session,
        "POST",
        c.api + "/task-queues/" + urllib.parse.quote("else/wt", safe="") + "/pause",
        {"reason": "x"},
        credentials=operator,
    )
    assert other_queue.status == 403


async def test_claim_work_hands_out_nothing_while_paused_and_no_more_than_max_running(
    flow: Flow,
) -> None:
    """claimWork passes the same gate: a paused queue's long poll ends empty (the hints stay,
    nothing is claimed); under maxRunning it hands out only the room left."""
    c = await flow.coordinator()
    queue_path = "/task-queues/" + urllib.parse.quote(f"{flow.prov}/{WT}", safe="")
    await c.ok("POST", queue_path + "/pause", {"reason": "claimWork"})
    tasks = [await flow.create(c) for _ in range(4)]
    for task_id in tasks:
        await flow.wait_for_hint(task_id, 0)
    assert await flow.claim_work(c, tasks=4) == []
    assert {(await c.status(t))["state"] for t in tasks} == {"pending"}

    await c.ok("POST", queue_path + "/resume")
    await c.ok("PUT", queue_path + "/limits", {"maxRunning": 3})
    claimed = await flow.claim_work(c, tasks=4)
    assert len(claimed) == 3
    assert await flow.claim_work(c, tasks=4) == []  # at the limit: the poll ends empty
    await c.report(claimed[0]["status"]["taskId"], 0, "completed")
    [last] = await flow.claim_work(c, tasks=4)
    assert last["status"]["taskId"] in tasks
