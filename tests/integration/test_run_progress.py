"""reportProgress and the task's progress through the real HTTP server, on SQLite and
PostgreSQL: a running run's reports kept (the last one wins) and read back by anyone;
refusals of a run that is not running (409), of a fraction outside 0 to 1 or a message too
long (400 naming it), of an unknown task or run (404); the scope, which the claim's temporary
credentials hold and no other run's do; and the reports gone with their task.
"""

from __future__ import annotations

from pathlib import Path

from devharness.api import call
from devharness.tasks import task_definition
from hawk_signing import Credentials
from tests.fixtures.clients import start_secured, worker_scopes
from tests.fixtures.coordinator import FakeClock, StartCoordinator

PROGRESS = "/task/{}/runs/{}/progress"


async def test_a_running_runs_last_report_is_read_back(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    clock = FakeClock()
    c = await start_coordinator(store_url=store_url, clock=clock)
    task_id = await c.create()
    assert await c.ok("GET", f"/task/{task_id}/progress") == {"runs": []}
    await c.claim(task_id)

    first = await c.ok("POST", PROGRESS.format(task_id, 0), {"fraction": 0.25, "message": "a"})
    assert first["fraction"] == 0.25 and first["message"] == "a"
    clock.advance(2)
    last = await c.ok("POST", PROGRESS.format(task_id, 0), {"fraction": 1})
    assert last == {
        "runId": 0,
        "fraction": 1.0,
        "message": None,
        "updated": last["updated"],
    }
    assert last["updated"] > first["updated"]
    assert await c.ok("GET", f"/task/{task_id}/progress") == {"runs": [last]}

    # Resolved, the run takes no more reports; its last stays readable.
    await c.report(task_id, 0, "completed")
    refused = await c.call("POST", PROGRESS.format(task_id, 0), {"fraction": 0.5})
    assert refused.status == 409, refused.body
    assert "not running" in refused.body["message"]
    assert await c.ok("GET", f"/task/{task_id}/progress") == {"runs": [last]}


async def test_bad_reports_are_refused_naming_what_is_wrong(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    c = await start_coordinator(store_url=store_url)
    task_id = await c.create()
    path = PROGRESS.format(task_id, 0)
    pending = await c.call("POST", path, {"fraction": 0.5})
    assert pending.status == 409, pending.body
    await c.claim(task_id)

    for body, named in [
        ({"fraction": 1.5}, "fraction"),
        ({"fraction": -0.1}, "fraction"),
        ({"fraction": "half"}, "fraction"),
        ({}, "fraction"),
        ({"fraction": 0.5, "message": "x" * 1001}, "message"),
    ]:
        response = await c.call("POST", path, body)
        assert response.status == 400, (body, response.body)
        assert named in response.body["message"], (body, response.body)
    # JSON has no NaN: the literal is refused before any check of the fraction.
    nan = await c.session.post(c.api + path, data='{"fraction": NaN}', headers=JSON)
    assert nan.status == 400, await nan.text()
    assert "NaN" in (await nan.json())["message"]

    assert (await c.call("POST", PROGRESS.format(task_id, 1), {"fraction": 0.5})).status == 404
    missing = await c.call("GET", "/task/AAAAAAAAQAC0000000000A/progress")
    assert missing.status == 404, missing.body
    assert await c.ok("GET", f"/task/{task_id}/progress") == {"runs": []}
    accepted = await c.ok("POST", path, {"fraction": 0, "message": "x" * 1000})
    assert len(accepted["message"]) == 1000


JSON = {"Content-Type": "application/json"}
WORKER_SCOPES = worker_scopes(task_definition()["provisionerId"], task_definition()["workerType"])


async def test_only_the_runs_own_credentials_report_its_progress(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    c, clients = await start_secured(
        start_coordinator,
        tmp_path / "clients.yml",
        {"producer": ["queue:create-task:*", "queue:scheduler-id:*"], "worker": WORKER_SCOPES},
    )
    creds = {name: Credentials.from_json(value) for name, value in clients.items()}
    mine, other = slugs = ["AAAAAAAAQAC0000000001A", "AAAAAAAAQAC0000000002A"]
    for task_id in slugs:
        created = await call(
            c.session,
            "PUT",
            f"{c.api}/task/{task_id}",
            task_definition(),
            credentials=creds["producer"],
        )
        assert created.status == 200, created.body
    claims = []
    for task_id in slugs:
        claimed = await call(
            c.session,
            "POST",
            f"{c.api}/task/{task_id}/runs/0/claim",
            {"workerGroup": "wg", "workerId": "w1"},
            credentials=creds["worker"],
        )
        assert claimed.status == 200, claimed.body
        claims.append(Credentials.from_json(claimed.body["credentials"]))
    url = c.api + PROGRESS
    body = {"fraction": 0.5}
    assert (await call(c.session, "POST", url.format(mine, 0), body)).status == 401
    worker = await call(c.session, "POST", url.format(mine, 0), body, credentials=creds["worker"])
    assert worker.status == 403, worker.body
    assert f"queue:resolve-task:{mine}/0" in worker.body["message"]
    others = await call(c.session, "POST", url.format(mine, 0), body, credentials=claims[1])
    assert others.status == 403, others.body
    own = await call(c.session, "POST", url.format(mine, 0), body, credentials=claims[0])
    assert own.status == 200, own.body
    # Anyone reads it, as anyone reads a task's status.
    read = await call(c.session, "GET", f"{c.api}/task/{mine}/progress")
    assert read.status == 200 and read.body["runs"][0]["fraction"] == 0.5, read.body
    assert other  # its run reported nothing
    assert (await call(c.session, "GET", f"{c.api}/task/{other}/progress")).body == {"runs": []}


async def test_progress_goes_with_its_task(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    c = await start_coordinator(store_url=store_url)
    task_id = await c.create()
    await c.claim(task_id)
    await c.ok("POST", PROGRESS.format(task_id, 0), {"fraction": 0.5})
    await c.report(task_id, 0, "completed")
    group = (await c.status(task_id))["taskGroupId"]
    assert await c.ok("DELETE", f"/tasks?taskGroupId={group}") == {"deleted": 1}
    assert (await c.call("GET", f"/task/{task_id}/progress")).status == 404
    await c.create(task_id)
    assert await c.ok("GET", f"/task/{task_id}/progress") == {"runs": []}
