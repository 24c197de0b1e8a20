"""watchRuns through the real HTTP server, on SQLite and PostgreSQL: a long poll over running
runs answers as soon as one of them is cancelled (cancelTask, cancelTaskGroup, the management
API's cancelTasks) or otherwise resolved, with the run's state and reason, and answers empty
after the long poll's timeout while they all still run. A watch on one replica hears of a
cancel on another sharing the store. Runs it may not watch, or that do not exist, come back
at once as run errors; a bad request is a 400 that says what was wrong.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import slugid

from devharness.api import call
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from hawk_signing import Credentials
from tests.fixtures.clients import start_secured
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator

LONG_POLL_MS = 20_000
"""The watches' long poll in the tests that cancel: far beyond the answer they expect."""


def refs(*runs: tuple[str, int]) -> dict[str, Any]:
    return {"runs": [{"taskId": task_id, "runId": run_id} for task_id, run_id in runs]}


async def watching(
    c: RunningCoordinator, *runs: tuple[str, int]
) -> asyncio.Future[tuple[float, Any]]:
    """A watchRuns call of ``runs`` in flight, once the coordinator waits on them; when it
    answers, its status, the seconds it took, and its body."""
    before = c.parts.service.run_watches.watched

    async def watch() -> tuple[float, Any]:
        response = await c.call("POST", "/runs/watch", refs(*runs))
        assert response.status == 200, response.body
        return time.monotonic(), response.body

    answer = asyncio.ensure_future(watch())
    await wait_until(
        lambda: answer.done() or c.parts.service.run_watches.watched >= before + len(runs),
        within=10,
        what="the watch registered",
    )
    assert not answer.done(), answer.result()
    return answer


async def answered_within(answer: asyncio.Future[tuple[float, Any]], since: float) -> Any:
    answered_at, body = await asyncio.wait_for(answer, 10)
    assert answered_at - since < 1.0, answered_at - since  # woken, not the 20 s timeout
    return body


async def running(c: RunningCoordinator, count: int, **overrides: Any) -> list[str]:
    task_ids = await c.create_many(count, **overrides)
    for task_id in task_ids:
        await c.claim(task_id)
    return task_ids


async def test_cancel_task_answers_a_waiting_watch_at_once(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    c = await start_coordinator(store_url=store_url, claim_work_timeout_ms=LONG_POLL_MS)
    cancelled, other = await running(c, 2)
    answer = await watching(c, (other, 0), (cancelled, 0))

    since = time.monotonic()
    await c.ok("POST", f"/task/{cancelled}/cancel")

    body = await answered_within(answer, since)
    assert body == {
        "runs": [
            {"taskId": cancelled, "runId": 0, "state": "exception", "reasonResolved": "canceled"}
        ]
    }
    assert c.parts.service.run_watches.watched == 0  # the call let go of its runs


async def test_cancel_task_group_and_bulk_cancel_answer_the_watches_of_their_runs(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    c = await start_coordinator(store_url=store_url, claim_work_timeout_ms=LONG_POLL_MS)
    group = slugid.nice()
    [in_group] = await running(c, 1, taskGroupId=group)
    [in_queue] = await running(c, 1, workerType="bulk-wt")
    by_group = await watching(c, (in_group, 0))
    by_filter = await watching(c, (in_queue, 0))

    since = time.monotonic()
    await c.ok("POST", f"/task-group/{group}/seal")
    await c.ok("POST", f"/task-group/{group}/cancel")
    assert (await answered_within(by_group, since))["runs"][0]["reasonResolved"] == "canceled"
    assert not by_filter.done()

    since = time.monotonic()
    assert await c.ok("POST", "/tasks/cancel?taskQueueId=test-prov%2Fbulk-wt") == {"cancelled": 1}
    body = await answered_within(by_filter, since)
    assert body["runs"] == [
        {"taskId": in_queue, "runId": 0, "state": "exception", "reasonResolved": "canceled"}
    ]


async def test_runs_already_stopped_or_unknown_are_answered_at_once(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(claim_work_timeout_ms=LONG_POLL_MS)
    done, still = await running(c, 2)
    await c.report(done, 0, "completed")
    missing = slugid.nice()

    since = time.monotonic()
    body = await c.ok("POST", "/runs/watch", refs((still, 0), (done, 0), (missing, 0), (still, 1)))

    assert time.monotonic() - since < 1.0
    assert body["runs"][0] == {
        "taskId": done,
        "runId": 0,
        "state": "completed",
        "reasonResolved": "completed",
    }
    assert [
        (item["taskId"], item["runId"], item["error"]["status"]) for item in body["runs"][1:]
    ] == [
        (missing, 0, 404),
        (still, 1, 404),
    ]


async def test_a_watch_answers_empty_after_the_long_poll(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(claim_work_timeout_ms=300)
    [task_id] = await running(c, 1)

    assert await c.ok("POST", "/runs/watch", refs((task_id, 0))) == {"runs": []}
    assert c.parts.service.run_watches.watched == 0


async def test_a_watch_hears_of_a_run_resolved_otherwise(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(claim_work_timeout_ms=LONG_POLL_MS)
    [task_id] = await running(c, 1)
    answer = await watching(c, (task_id, 0))

    since = time.monotonic()
    await c.report(task_id, 0, "exception", "worker-shutdown")

    body = await answered_within(answer, since)
    assert body["runs"][0]["reasonResolved"] == "worker-shutdown"


async def test_a_cancel_on_one_replica_reaches_a_watch_on_another(
    start_coordinator: StartCoordinator, postgres_schema_url: str
) -> None:
    watched, other = [
        await start_coordinator(store_url=postgres_schema_url, claim_work_timeout_ms=LONG_POLL_MS)
        for _ in range(2)
    ]
    [task_id] = await running(watched, 1)
    answer = await watching(watched, (task_id, 0))

    since = time.monotonic()
    await other.ok("POST", f"/task/{task_id}/cancel")

    answered_at, body = await asyncio.wait_for(answer, 10)
    assert answered_at - since < 2.0  # the coalesced read every half second
    assert body["runs"][0]["reasonResolved"] == "canceled"


async def test_a_worker_watches_only_the_runs_it_holds(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    c, credentials = await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {
            "worker": ["queue:claim-task:test-prov/test-wt", "queue:worker-id:wg/w1"],
            "stranger": ["queue:worker-id:wg/w2"],
        },
        claim_work_timeout_ms=300,
    )
    task_id = slugid.nice()
    root = Credentials.from_json(credentials["root"])
    created = await call(
        c.session, "PUT", f"{c.api}/task/{task_id}", task_definition(), credentials=root
    )
    assert created.status == 200, created.body
    claimed = await call(
        c.session,
        "POST",
        f"{c.api}/task/{task_id}/runs/0/claim",
        {"workerGroup": "wg", "workerId": "w1"},
        credentials=Credentials.from_json(credentials["worker"]),
    )
    assert claimed.status == 200, claimed.body

    holder = await call(
        c.session,
        "POST",
        f"{c.api}/runs/watch",
        refs((task_id, 0)),
        credentials=Credentials.from_json(credentials["worker"]),
    )
    stranger = await call(
        c.session,
        "POST",
        f"{c.api}/runs/watch",
        refs((task_id, 0)),
        credentials=Credentials.from_json(credentials["stranger"]),
    )

    assert (holder.status, holder.body) == (200, {"runs": []})
    assert stranger.status == 200, stranger.body
    [refused] = stranger.body["runs"]
    assert refused["error"]["status"] == 403
    assert "queue:worker-id:wg/w1" in refused["error"]["message"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"runs": "abc"}, "runs"),
        ({"runs": []}, "runs"),
        ({"runs": [{"taskId": "fN1SbArXTPSVFNUvaOlinQ", "runId": 0}] * 2}, "runs"),
        (
            {"runs": [{"taskId": slugid.nice(), "runId": 0} for _ in range(33)]},
            "runs",
        ),
        ({"runs": [{"taskId": "fN1SbArXTPSVFNUvaOlinQ"}]}, "runId"),
    ],
)
async def test_bad_watches_are_400s_that_say_what_is_wrong(
    start_coordinator: StartCoordinator, body: dict[str, Any], says: str
) -> None:
    c = await start_coordinator()

    response = await c.call("POST", "/runs/watch", body)

    assert response.status == 400, response.body
    assert says in response.body["message"]
