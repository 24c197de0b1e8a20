"""claimRuns, reclaimRuns and resolveRuns through the real HTTP server, on SQLite and PostgreSQL.

A batch answers each run as its single call would (claimTask, reclaimTask, the reports), in
request order, and one run refused (unknown, not pending, held by another worker, a missing
scope) never fails the others. Bad batches (empty, over 32, a run named twice, a reason where
none belongs) are a 400 for the whole request, with nothing written. Concurrent batches over
the same runs are decided by compare-and-set: each run is held by exactly one worker.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import slugid

from devharness.api import call
from devharness.tasks import task_definition
from hawk_signing import Credentials
from tests.fixtures.clients import start_secured, worker_scopes
from tests.fixtures.coordinator import (
    CLAIM_FIELDS,
    WORKER,
    FakeClock,
    RunningCoordinator,
    StartCoordinator,
)


def refs(task_ids: list[str], run_id: int = 0) -> list[dict[str, Any]]:
    return [{"taskId": task_id, "runId": run_id} for task_id in task_ids]


async def claim_runs(
    c: RunningCoordinator, runs: list[dict[str, Any]], worker: dict[str, str] = WORKER
) -> list[dict[str, Any]]:
    response = await c.call("POST", "/claim-runs", {**worker, "runs": runs})
    assert response.status == 200, response.body
    claims: list[dict[str, Any]] = response.body["claims"]
    assert len(claims) == len(runs)
    return claims


def error_of(item: dict[str, Any]) -> tuple[int, str]:
    return item["error"]["status"], item["error"]["code"]


async def test_claim_runs_claims_each_run_and_answers_the_others_per_item(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    c = await start_coordinator(store_url=store_url)
    pending = await c.create_many(3)
    [taken] = await c.create_many(1)
    await claim_runs(c, refs([taken]), {"workerGroup": "wg", "workerId": "other"})
    unknown = slugid.nice()
    runs = [*refs(pending[:2]), *refs([taken, unknown]), {"taskId": pending[2], "runId": 1}]

    claims = await claim_runs(c, runs)

    for claim, task_id in zip(claims[:2], pending, strict=False):
        assert claim["status"]["taskId"] == task_id
        assert (claim["runId"], claim["workerId"]) == (0, "w1")
        assert set(claim) == CLAIM_FIELDS
        assert claim["status"] == await c.status(task_id)
    assert claims[2]["taskId"] == taken and error_of(claims[2]) == (409, "RequestConflict")
    assert "already claimed by wg/other" in claims[2]["error"]["message"]
    assert error_of(claims[3]) == (404, "ResourceNotFound")
    assert error_of(claims[4]) == (404, "ResourceNotFound")
    assert (await c.status(pending[2]))["state"] == "pending"


async def test_a_repeated_claim_is_answered_again_as_claim_task_does(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    task_ids = await c.create_many(2)
    first = await claim_runs(c, refs(task_ids))
    again = await claim_runs(c, refs(task_ids))
    assert [a["takenUntil"] for a in again] == [f["takenUntil"] for f in first]
    assert [a["status"] for a in again] == [f["status"] for f in first]


async def test_two_runs_of_one_task_in_one_batch_are_applied_one_after_the_other(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    c = await start_coordinator(store_url=store_url)
    [task_id] = await c.create_many(1, retries=1)
    await claim_runs(c, refs([task_id]))
    response = await c.call(
        "POST",
        "/resolve-runs",
        {
            "reports": [
                {
                    "taskId": task_id,
                    "runId": 0,
                    "resolution": "exception",
                    "reason": "intermittent-task",
                }
            ]
        },
    )
    assert response.status == 200, response.body
    # a stale hint of run 0 and the fresh one of run 1, as one Azure get may return them
    claims = await claim_runs(c, [{"taskId": task_id, "runId": 0}, {"taskId": task_id, "runId": 1}])
    assert error_of(claims[0]) == (409, "RequestConflict")
    assert claims[1]["runId"] == 1 and claims[1]["status"]["state"] == "running"


async def test_reclaim_and_resolve_runs(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    clock = FakeClock()
    c = await start_coordinator(store_url=store_url, clock=clock)
    task_ids = await c.create_many(4, retries=1)
    claims = await claim_runs(c, refs(task_ids))
    clock.advance(600)

    response = await c.call("POST", "/reclaim-runs", {"runs": refs(task_ids[:3])})
    assert response.status == 200, response.body
    reclaims = response.body["reclaims"]
    assert [r["status"]["taskId"] for r in reclaims] == task_ids[:3]
    assert all(r["takenUntil"] > claims[0]["takenUntil"] for r in reclaims)
    assert all(set(r) >= {"credentials", "workerGroup", "workerId"} for r in reclaims)

    reports = [
        {"taskId": task_ids[0], "runId": 0, "resolution": "completed"},
        {"taskId": task_ids[1], "runId": 0, "resolution": "failed"},
        {"taskId": task_ids[2], "runId": 0, "resolution": "exception", "reason": "worker-shutdown"},
        {"taskId": task_ids[3], "runId": 1, "resolution": "completed"},
    ]
    response = await c.call("POST", "/resolve-runs", {"reports": reports})
    assert response.status == 200, response.body
    answers = response.body["reports"]
    assert [a["status"]["state"] for a in answers[:3]] == ["completed", "failed", "pending"]
    assert [a["taskId"] for a in answers] == task_ids
    assert error_of(answers[3]) == (404, "ResourceNotFound")
    retried = await c.status(task_ids[2])
    assert [(r["state"], r.get("reasonResolved")) for r in retried["runs"]] == [
        ("exception", "worker-shutdown"),
        ("pending", None),
    ]
    assert (await c.status(task_ids[3]))["state"] == "running"

    # repeating a report answers the same; reclaiming a resolved run is a conflict
    response = await c.call("POST", "/resolve-runs", {"reports": reports[:1]})
    assert response.body["reports"][0]["status"]["state"] == "completed"
    response = await c.call("POST", "/reclaim-runs", {"runs": refs(task_ids[:1])})
    assert error_of(response.body["reclaims"][0]) == (409, "RequestConflict")


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("/claim-runs", {**WORKER, "runs": []}, "should be non-empty"),
        ("/claim-runs", {**WORKER, "runs": refs([slugid.nice() for _ in range(33)])}, "too long"),
        ("/claim-runs", {**WORKER, "runs": refs(["AAAAAAAAQAC0000000001A"] * 2)}, "non-unique"),
        ("/claim-runs", {"runs": refs([slugid.nice()])}, "'workerGroup' is a required"),
        ("/reclaim-runs", {"runs": []}, "should be non-empty"),
        ("/reclaim-runs", {"runs": [{"taskId": "nope", "runId": 0}]}, "body.runs[0].taskId"),
        ("/resolve-runs", {"reports": []}, "should be non-empty"),
        (
            "/resolve-runs",
            {
                "reports": [
                    {"taskId": "AAAAAAAAQAC0000000001A", "runId": 0, "resolution": "completed"},
                    {"taskId": "AAAAAAAAQAC0000000001A", "runId": 0, "resolution": "failed"},
                ]
            },
            "reports[1]: run 0 of task AAAAAAAAQAC0000000001A is already reports[0]",
        ),
        (
            "/resolve-runs",
            {"reports": [{"taskId": slugid.nice(), "runId": 0, "resolution": "exception"}]},
            "'reason' is a required property",
        ),
        (
            "/resolve-runs",
            {
                "reports": [
                    {
                        "taskId": slugid.nice(),
                        "runId": 0,
                        "resolution": "completed",
                        "reason": "worker-shutdown",
                    }
                ]
            },
            "body.reports[0]",
        ),
        (
            "/resolve-runs",
            {
                "reports": [
                    {
                        "taskId": slugid.nice(),
                        "runId": 0,
                        "resolution": "exception",
                        "reason": "claim-expired",
                    }
                ]
            },
            "body.reports[0].reason",
        ),
    ],
)
async def test_bad_batches_are_400_and_write_nothing(
    start_coordinator: StartCoordinator, path: str, body: dict[str, Any], fragment: str
) -> None:
    c = await start_coordinator()
    [task_id] = await c.create_many(1)
    await claim_runs(c, refs([task_id]))
    before = await c.status(task_id)
    response = await c.call("POST", path, body)
    assert response.status == 400, response.body
    assert response.body["code"] == "InputValidationError"
    assert fragment in response.body["message"], response.body["message"]
    assert await c.status(task_id) == before


async def test_concurrent_batches_hold_each_run_exactly_once(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    c = await start_coordinator(store_url=store_url)
    task_ids = await c.create_many(32)
    workers = [{"workerGroup": "wg", "workerId": f"w{i}"} for i in range(6)]
    # every worker asks for every run, each in its own order
    batches = await asyncio.gather(
        *(
            claim_runs(c, refs(task_ids[i:] + task_ids[:i]), worker)
            for i, worker in enumerate(workers)
        )
    )
    holders: dict[str, str] = {}
    for worker, claims in zip(workers, batches, strict=True):
        for claim in claims:
            if "error" in claim:
                assert error_of(claim) == (409, "RequestConflict"), claim
                continue
            holder = holders.setdefault(claim["status"]["taskId"], worker["workerId"])
            assert holder == worker["workerId"]
    assert sorted(holders) == sorted(task_ids)
    for task_id, worker_id in holders.items():
        [run] = (await c.status(task_id))["runs"]
        assert (run["state"], run["workerId"]) == ("running", worker_id)

    # reports racing the same runs: exactly one resolution each
    resolutions = ["completed", "failed"]
    answers = await asyncio.gather(
        *(
            c.call(
                "POST",
                "/resolve-runs",
                {"reports": [{**ref, "resolution": resolution} for ref in refs(task_ids)]},
            )
            for resolution in resolutions
        )
    )
    assert [a.status for a in answers] == [200, 200]
    won: Counter[str] = Counter()
    for resolution, answer in zip(resolutions, answers, strict=True):
        for item in answer.body["reports"]:
            if "error" in item:
                assert error_of(item) == (409, "RequestConflict"), item
            else:
                assert item["status"]["state"] == resolution
                won[item["taskId"]] += 1
    assert won == Counter({task_id: 1 for task_id in task_ids})


# --- scopes --------------------------------------------------------------------------------


async def test_batch_scopes(start_coordinator: StartCoordinator, tmp_path: Path) -> None:
    c, credentials = await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {
            "worker/prov": worker_scopes("prov"),
            "worker/both": worker_scopes("prov") + worker_scopes("other"),
            "worker/elsewhere": ["queue:worker-id:elsewhere/*", "queue:claim-task:prov/wt"],
            "creator": [
                "queue:create-task:lowest:*",
                "queue:scheduler-id:-",
                "queue:create-task:project:none",
            ],
        },
    )

    async def as_client(path: str, body: Any, client: str | None) -> Any:
        signer = None if client is None else Credentials.from_json(credentials[client])
        return await _signed(c, path, body, signer)

    task_ids = [slugid.nice() for _ in range(3)]
    tasks = [
        {"taskId": t, "task": task_definition(provisionerId=p, workerType="wt")}
        for t, p in zip(task_ids, ["prov", "prov", "other"], strict=True)
    ]
    response = await _signed(
        c, "/tasks", {"tasks": tasks}, Credentials.from_json(credentials["creator"]), "PUT"
    )
    assert response.status == 200, response.body

    claim = {**WORKER, "runs": refs(task_ids)}
    assert (await as_client("/claim-runs", claim, None)).status == 401
    refused = await as_client("/claim-runs", claim, "worker/elsewhere")
    assert refused.status == 403 and "queue:worker-id:wg/w1" in refused.body["message"]
    for task_id in task_ids:
        assert (await c.status(task_id))["state"] == "pending"

    response = await as_client("/claim-runs", claim, "worker/prov")
    assert response.status == 200, response.body
    claims = response.body["claims"]
    assert [c.get("runId") for c in claims[:2]] == [0, 0]
    assert error_of(claims[2]) == (403, "InsufficientScopes")
    assert "queue:claim-task:other/wt" in claims[2]["error"]["message"]
    response = await as_client("/claim-runs", {**WORKER, "runs": refs(task_ids[2:])}, "worker/both")
    assert "error" not in response.body["claims"][0], response.body

    # the holder's worker-id scope reclaims and resolves its runs, another worker's does not
    response = await as_client("/reclaim-runs", {"runs": refs(task_ids)}, "worker/prov")
    assert ["error" in r for r in response.body["reclaims"]] == [False, False, False]
    response = await as_client("/reclaim-runs", {"runs": refs(task_ids)}, "worker/elsewhere")
    assert [error_of(r) for r in response.body["reclaims"]] == [(403, "InsufficientScopes")] * 3
    assert "queue:worker-id:wg/w1" in response.body["reclaims"][0]["error"]["message"]
    # the run's temporary credentials resolve that run and no other
    run_credentials = Credentials.from_json(claims[0]["credentials"])
    reports = [{**ref, "resolution": "completed"} for ref in refs(task_ids[:2])]
    response = await _signed(c, "/resolve-runs", {"reports": reports}, run_credentials)
    assert response.status == 200, response.body
    assert response.body["reports"][0]["status"]["state"] == "completed"
    assert error_of(response.body["reports"][1]) == (403, "InsufficientScopes")
    response = await as_client("/resolve-runs", {"reports": reports[1:]}, "worker/prov")
    assert response.body["reports"][0]["status"]["state"] == "completed"
    assert (await as_client("/resolve-runs", {"reports": reports}, None)).status == 401


async def _signed(
    c: RunningCoordinator,
    path: str,
    body: Any,
    credentials: Credentials | None,
    method: str = "POST",
) -> Any:
    return await call(c.session, method, c.api + path, body, credentials=credentials)
