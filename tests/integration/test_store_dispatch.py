"""Store dispatch (``COORDINATOR_DISPATCH=store``, docs/dispatch.md) through the real HTTP
server: claimWork served from SQLite and PostgreSQL, in priority order, batched, woken when a
run becomes pending (in process, and across replicas through PostgreSQL ``LISTEN``/``NOTIFY``),
and the claimWork race run under both dispatches: many callers, never one run twice.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
import slugid

from coordinator.domain.records import to_iso
from coordinator.domain.task_queues import TaskQueue
from devharness.azurite import AzuriteProcess
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator

PROV, WT = "test-prov", "test-wt"
WORKER = {"workerGroup": "wg", "workerId": "w1"}


async def claim_work(
    coordinator: RunningCoordinator,
    *,
    tasks: int = 32,
    worker_id: str = "w1",
    weights: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """One claimWork call of ``wg/<worker_id>`` (with ``weights`` when given); its claims."""
    body: dict[str, Any] = {"workerGroup": "wg", "workerId": worker_id, "tasks": tasks}
    if weights is not None:
        body["weights"] = weights
    claims: list[dict[str, Any]] = (await coordinator.ok("POST", f"/claim-work/{PROV}/{WT}", body))[
        "tasks"
    ]
    return claims


def claimed_ids(claims: list[dict[str, Any]]) -> list[str]:
    return [claim["status"]["taskId"] for claim in claims]


async def timed(call: Any) -> tuple[float, Any]:
    """Seconds the awaitable took, and its result."""
    started = time.monotonic()
    result = await call
    return time.monotonic() - started, result


@dataclass(frozen=True)
class Dispatch:
    """How the coordinators of a test dispatch: their settings, how many replicas share the
    store, and the provisionerId the test's tasks use."""

    settings: dict[str, Any]
    replicas: int
    provisioner_id: str = PROV


@pytest.fixture(params=["store-sqlite", "store-postgres", "store-postgres-replicas", "azure"])
def dispatch(request: pytest.FixtureRequest) -> Dispatch:
    """Each dispatch and store: SQLite or PostgreSQL under store dispatch (one coordinator, or
    two replicas on one schema), and Azure dispatch on Azurite."""
    settings: dict[str, Any] = {"claim_work_timeout_ms": 5_000}
    if request.param == "azure":
        azurite: AzuriteProcess = request.getfixturevalue("azurite")
        namespace: AzureNamespace = request.getfixturevalue("azure_namespace")
        settings |= {
            "azure_connection_string": azurite.connection_string,
            "queue_prefix": namespace.queue_prefix,
        }
        return Dispatch(settings=settings, replicas=1, provisioner_id=namespace.provisioner_id)
    if request.param != "store-sqlite":
        settings["store_url"] = request.getfixturevalue("postgres_schema_url")
    return Dispatch(settings=settings, replicas=2 if request.param.endswith("replicas") else 1)


async def test_fifty_claim_work_callers_get_one_run_each_never_the_same(
    start_coordinator: StartCoordinator, dispatch: Dispatch
) -> None:
    coordinators = [await start_coordinator(**dispatch.settings) for _ in range(dispatch.replicas)]
    provisioner = dispatch.provisioner_id
    task_ids = set(await coordinators[0].create_many(50, provisionerId=provisioner))
    body = {"workerGroup": "wg", "tasks": 1}

    answers = await asyncio.gather(
        *(
            coordinators[index % len(coordinators)].ok(
                "POST", f"/claim-work/{provisioner}/{WT}", {**body, "workerId": f"w{index}"}
            )
            for index in range(50)
        )
    )

    assert [len(answer["tasks"]) for answer in answers] == [1] * 50
    claimed = Counter(answer["tasks"][0]["status"]["taskId"] for answer in answers)
    assert set(claimed) == task_ids and set(claimed.values()) == {1}
    for index, answer in enumerate(answers):
        claim = answer["tasks"][0]
        assert claim["workerId"] == f"w{index}"
        status = await coordinators[0].status(claim["status"]["taskId"])
        assert [(run["state"], run["workerId"]) for run in status["runs"]] == [
            ("running", f"w{index}")
        ]


async def test_claim_work_hands_out_by_priority_then_age_in_batches_of_up_to_32(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    low = await c.create_many(30, priority="lowest")
    high = [await c.create(priority="high") for _ in range(5)]

    first = claimed_ids(await claim_work(c, tasks=32))
    second = claimed_ids(await claim_work(c, tasks=32))

    assert first == high + low[:27]  # createTasks makes its batch visible at one time
    assert set(second) == set(low[27:])
    assert (await c.call("GET", f"/poll-task-url/{PROV}/{WT}")).status == 404


@pytest.fixture(params=["sqlite", "postgres"])
def on_store(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The settings of store dispatch from SQLite, or from PostgreSQL."""
    if request.param == "sqlite":
        return {}
    return {"store_url": request.getfixturevalue("postgres_schema_url")}


async def test_claim_work_draws_each_priority_by_the_workers_weights(
    start_coordinator: StartCoordinator, on_store: dict[str, Any]
) -> None:
    """The counts of a sustained load are tested on the store (tests/integration/store); here
    the weights go from claimWork's body to the store's draw."""
    c = await start_coordinator(**on_store)
    high = [await c.create(priority="highest") for _ in range(3)]
    low = [await c.create(priority="lowest") for _ in range(3)]

    assert claimed_ids(await claim_work(c, tasks=1)) == high[:1]
    # 1e9 against the others' default weights: another priority about once in 1e7 draws
    assert sorted(claimed_ids(await claim_work(c, tasks=3, weights={"lowest": 1e9}))) == sorted(low)
    # only one priority left with work: it gets every draw
    assert claimed_ids(await claim_work(c, tasks=5, weights={"lowest": 1e9})) == high[1:]


async def test_claim_work_refuses_weights_naming_each_bad_one(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    await c.create(priority="lowest")
    weights = {"normal": 1, "bogus": 2, "lowest": 0, "high": "x", "low": -2, "medium": 1}
    response = await c.call(
        "POST", f"/claim-work/{PROV}/{WT}", {**WORKER, "tasks": 1, "weights": weights}
    )

    assert response.status == 400, response.body
    message = response.body["message"]
    for named in ("'normal'", "'bogus'", "weights.lowest", "weights.high", "weights.low:"):
        assert named in message, message
    assert "weights.medium" not in message
    for bad in ([1], {"lowest": None}, {"lowest": True}):
        body = {**WORKER, "tasks": 1, "weights": bad}
        assert (await c.call("POST", f"/claim-work/{PROV}/{WT}", body)).status == 400
    # refused before any claim: the run is still there for a good request
    assert len(await claim_work(c, tasks=1, weights={"medium": 3})) == 1


async def test_a_waiting_claim_work_is_answered_as_soon_as_a_run_becomes_pending(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(claim_work_timeout_ms=20_000)
    call = asyncio.ensure_future(timed(claim_work(c)))
    await waiting(c, 1)  # nothing to claim yet
    task_id = await c.create()

    seconds, claims = await call
    assert claimed_ids(claims) == [task_id]
    assert seconds < 2.0  # woken by the create, well before the idle poll (5 s)


async def quarantine(coordinator: RunningCoordinator, worker_id: str) -> None:
    """Quarantine ``wg/<worker_id>`` (seen already) for an hour, in this coordinator's copy too."""
    await coordinator.parts.workers.flush()
    until = to_iso(int(time.time() * 1000) + 3_600_000)
    await coordinator.ok(
        "PUT",
        f"/provisioners/{PROV}/worker-types/{WT}/workers/wg/{worker_id}",
        {"quarantineUntil": until, "quarantineInfo": "test"},
    )
    await coordinator.parts.workers.refresh_quarantines()


async def waiting(coordinator: RunningCoordinator, calls: int) -> None:
    """Until ``calls`` claimWork calls wait on the test's task queue."""
    dispatch = coordinator.parts.dispatch
    await wait_until(
        lambda: dispatch.waiting_claims(TaskQueue(PROV, WT)) == calls,
        within=10,
        what=f"{calls} claimWork calls waiting",
    )


async def create_answers(
    coordinator: RunningCoordinator, priorities: list[str], *, batched: bool
) -> list[dict[str, Any]]:
    """createTask per task, or one createTasks, of tasks of these priorities; each answer's
    status."""
    tasks = [(slugid.nice(), task_definition(priority=p)) for p in priorities]
    if batched:
        body = {"tasks": [{"taskId": t, "task": d} for t, d in tasks]}
        return [item["status"] for item in (await coordinator.ok("PUT", "/tasks", body))["tasks"]]
    return [(await coordinator.ok("PUT", f"/task/{t}", d))["status"] for t, d in tasks]


@pytest.mark.parametrize("batched", [False, True], ids=["createTask", "createTasks"])
async def test_tasks_created_for_waiting_calls_are_claimed_in_the_create_s_own_write(
    on_store: dict[str, Any], start_coordinator: StartCoordinator, batched: bool
) -> None:
    c = await start_coordinator(claim_work_timeout_ms=20_000, **on_store)
    first = asyncio.ensure_future(claim_work(c, tasks=1, worker_id="first"))
    await waiting(c, 1)
    second = asyncio.ensure_future(claim_work(c, tasks=2, worker_id="second"))
    await waiting(c, 2)

    statuses = await create_answers(c, ["lowest", "high", "lowest", "lowest"], batched=batched)

    # the longest-waiting call takes the highest priority's run, the next as many as it
    # asked for (createTasks); one createTask's run goes to each call in turn, and each call
    # answers with what it got
    created = [status["taskId"] for status in statuses]
    taken = {"first": [1], "second": [0, 2]} if batched else {"first": [0], "second": [1]}
    assert claimed_ids(await first) == [created[i] for i in taken["first"]]
    assert claimed_ids(await second) == [created[i] for i in taken["second"]]
    # the creates' answers say so already: claimed in the write that created them
    for worker_id, indexes in taken.items():
        for i in indexes:
            run = statuses[i]["runs"][0]
            assert (run["state"], run["workerId"]) == ("running", worker_id)
            assert run["started"] == run["scheduled"]
    left = sorted(set(range(4)) - {i for indexes in taken.values() for i in indexes})
    assert all(statuses[i]["runs"][0]["state"] == "pending" for i in left)
    assert sorted(claimed_ids(await claim_work(c, tasks=4))) == sorted(created[i] for i in left)


async def test_a_quarantined_or_weighted_waiting_call_is_not_handed_a_new_task(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(claim_work_timeout_ms=20_000)
    seed = await c.create()  # the worker claims it, and is seen: it can be quarantined
    assert claimed_ids(await claim_work(c, worker_id="bad", tasks=1)) == [seed]
    await quarantine(c, "bad")
    quarantined = asyncio.ensure_future(claim_work(c, worker_id="bad", tasks=1))
    await waiting(c, 1)
    weighted = asyncio.ensure_future(claim_work(c, worker_id="w", tasks=1, weights={"low": 1}))
    await waiting(c, 2)

    (status,) = await create_answers(c, ["lowest"], batched=False)

    assert status["runs"][0]["state"] == "pending"  # nobody took it in the create's write
    assert claimed_ids(await weighted) == [status["taskId"]]  # woken, it claimed it itself
    assert not quarantined.done()
    quarantined.cancel()


async def test_a_delayed_run_is_handed_out_once_visible(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(claim_work_timeout_ms=20_000)
    not_before = int(time.time() * 1000) + 1_500
    task_id = await c.create(notBefore=to_iso(not_before))

    seconds, claims = await timed(claim_work(c))

    assert claimed_ids(claims) == [task_id]
    assert time.time() * 1000 >= not_before
    assert seconds < 4.0  # a wake-up at its visible time, not the idle poll's


async def test_replicas_wake_each_others_long_polls_through_postgres(
    start_coordinator: StartCoordinator, postgres_schema_url: str
) -> None:
    one, other = [
        await start_coordinator(store_url=postgres_schema_url, claim_work_timeout_ms=20_000)
        for _ in range(2)
    ]
    call = asyncio.ensure_future(timed(claim_work(other)))
    await waiting(other, 1)
    task_id = await one.create()

    seconds, claims = await call
    assert claimed_ids(claims) == [task_id]
    assert seconds < 2.0  # NOTIFY, not the idle poll (5 s)


async def test_a_quarantined_worker_gets_nothing_from_the_store(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(claim_work_timeout_ms=500)
    assert await claim_work(c, worker_id="bad") == []  # nothing yet; the worker is seen
    await quarantine(c, "bad")
    task_id = await c.create()

    assert await claim_work(c, worker_id="bad") == []
    assert claimed_ids(await claim_work(c, worker_id="good")) == [task_id]


async def test_a_paused_or_limited_queue_holds_its_runs_back_from_the_store(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(claim_work_timeout_ms=300)
    queue = f"/task-queues/{PROV}%2F{WT}"
    task_ids = await c.create_many(3)
    await c.ok("POST", queue + "/pause", {"reason": "maintenance"})

    assert await claim_work(c) == []  # the gate lets none through: the poll ends empty
    assert {(await c.status(t))["state"] for t in task_ids} == {"pending"}

    await c.ok("POST", queue + "/resume", {})
    await c.ok("PUT", queue + "/limits", {"maxRunning": 2})
    first = claimed_ids(await claim_work(c))
    assert len(first) == 2 and set(first) < set(task_ids)
    assert await claim_work(c) == []  # two running: nothing more until one resolves
    await c.report(first[0], 0, "completed")
    assert claimed_ids(await claim_work(c)) == sorted(set(task_ids) - set(first))
