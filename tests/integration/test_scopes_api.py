"""Authentication and scopes through the coordinator's real endpoints (docs/protocol.md).

The official ``taskcluster`` client (113.x, ``taskcluster.aio``) against a coordinator with
authentication on and narrowly scoped clients, each test twice: the clients listed with their
scopes in the clients file, and made through the auth API holding their scopes through roles:

- credentials that do not verify, and none at all on a protected endpoint, are 401, and the
  rejected request changes nothing;
- valid credentials without the scope are 403 naming exactly what is missing; with it, 200:
  createTask's priority ladder, ``queue:route:<route>`` per route, every scope of
  ``task.scopes``, and the per-endpoint scopes of producers and workers;
- a claim's temporary credentials reclaim and resolve their run and nothing else, and expire
  at ``takenUntil`` (plus Taskcluster's 5 minutes of certificate skew), on the coordinator's
  injected clock;
- pollTaskUrls answers only callers holding ``queue:poll-task-urls:<prov>/<wt>`` (through
  client 3.0.2, in tests/e2e/test_taskcluster_3.py).

Client-side clock skew uses freezegun on the client's call only; the coordinator runs on a
:class:`FakeClock`, which freezegun does not move.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import mohawk
import pytest
import slugid
import taskcluster
from freezegun import freeze_time

from coordinator.domain.records import from_iso
from devharness.tasks import task_definition
from tests.fixtures.clients import (
    Credentials,
    Queue,
    api_clients,
    certificate,
    missing_scopes,
    rejected,
    start_secured,
    worker_scopes,
)
from tests.fixtures.coordinator import WORKER, FakeClock, RunningCoordinator, StartCoordinator

PROV, WT = "prov", "wt"
POOL = f"{PROV}/{WT}"
GROUP = slugid.nice()

CLIENTS: dict[str, list[str]] = {
    "creator/highest": [
        f"queue:create-task:highest:{POOL}",
        "queue:scheduler-id:-",
        "queue:create-task:project:none",
    ],
    "creator/low": [
        f"queue:create-task:low:{POOL}",
        "queue:scheduler-id:-",
        "queue:create-task:project:none",
    ],
    "creator/routes": [
        f"queue:create-task:lowest:{POOL}",
        "queue:scheduler-id:-",
        "queue:create-task:project:none",
        "queue:route:index.project.*",
    ],
    "creator/delegating": [
        f"queue:create-task:lowest:{POOL}",
        "queue:scheduler-id:-",
        "queue:create-task:project:none",
        "secrets:get:project/*",
        "docker-worker:cache:build",
    ],
    "producer/group": [f"queue:cancel-task:-/{GROUP}/*", f"queue:rerun-task:-/{GROUP}/*"],
    "worker": worker_scopes(PROV, WT),
    "worker/other-pool": worker_scopes(PROV, "other"),
}


@dataclass(kw_only=True)
class Secured:
    """A coordinator with authentication on, its clients' credentials and its clock."""

    coordinator: RunningCoordinator
    creds: dict[str, Credentials]
    clock: FakeClock

    def queue(self, client_id: str | None = None) -> Queue:
        return Queue("aio", self.coordinator.url, self.creds[client_id] if client_id else None)

    def as_(self, credentials: Credentials) -> Queue:
        return Queue("aio", self.coordinator.url, credentials)

    def definition(self, **fields: Any) -> dict[str, Any]:
        fields = {"provisionerId": PROV, "workerType": WT, "taskGroupId": GROUP, **fields}
        return task_definition(self.clock.now, **fields)

    async def create(self, **fields: Any) -> str:
        task_id: str = slugid.nice()
        await self.queue("root").createTask(task_id, self.definition(**fields))
        return task_id

    async def state(self, task_id: str) -> tuple[str, ...]:
        """The states of the task's runs (a missing task raises 404)."""
        status = await self.queue().status(task_id)
        return tuple(run["state"] for run in status["status"]["runs"])

    async def exists(self, task_id: str) -> bool:
        try:
            await self.queue().status(task_id)
        except taskcluster.exceptions.TaskclusterRestFailure as error:
            assert error.status_code == 404
            return False
        return True


@pytest.fixture(params=["clients-file", "auth-api-roles"])
async def secured(
    request: pytest.FixtureRequest, start_coordinator: StartCoordinator, tmp_path: Path
) -> Secured:
    """The clients of :data:`CLIENTS`, either listed with their scopes in the clients file,
    or made through the auth API holding them only through a role each: every test of this
    module then also proves the scope checks see roles' expansions."""
    clock = FakeClock()
    in_file = CLIENTS if request.param == "clients-file" else {}
    coordinator, creds = await start_secured(
        start_coordinator, tmp_path / "clients.json", in_file, clock=clock
    )
    if request.param == "auth-api-roles":
        creds |= await api_clients(creds["root"], coordinator.url, CLIENTS)
    return Secured(coordinator=coordinator, creds=creds, clock=clock)


# --- 401 --------------------------------------------------------------------------------------


async def test_credentials_that_do_not_verify_are_401_and_change_nothing(
    secured: Secured,
) -> None:
    task_id = slugid.nice()
    body = secured.definition()
    root = secured.creds["root"]
    now = datetime.now(UTC)
    expired = taskcluster.createTemporaryCredentials(
        root["clientId"],
        root["accessToken"],
        now - timedelta(minutes=40),
        now - timedelta(minutes=6),  # past the expiry and the 5 minutes of skew after it
        ["*"],
    )
    cases: dict[str, Credentials | None] = {
        "signature does not match": {**root, "accessToken": "wrong-" + root["accessToken"]},
        "does not match for clientId nobody: unknown clientId or wrong accessToken": {
            "clientId": "nobody",
            "accessToken": "x" * 44,
        },
        "the credentials expired": expired,
        f"queue:create-task:lowest:{POOL}": None,  # no Authorization header at all
    }
    for reason, credentials in cases.items():
        client = secured.as_(credentials) if credentials else secured.queue()
        status, error = await rejected(client.createTask(task_id, body))
        assert (status, error["code"]) == (401, "AuthenticationFailed"), reason
        assert reason in error["message"]

    # A body other than the one signed.
    url = f"{secured.coordinator.api}/task/{task_id}"
    signed = json.dumps({**body, "priority": "lowest"}).encode()
    sent = json.dumps({**body, "priority": "highest"}).encode()
    sender = mohawk.Sender(
        {"id": root["clientId"], "key": root["accessToken"], "algorithm": "sha256"},
        url,
        "PUT",
        content=signed,
        content_type="application/json",
    )
    headers = {"Authorization": sender.request_header, "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http, http.put(url, data=sent, headers=headers) as r:
        assert r.status == 401
        assert "payload hash" in (await r.json())["message"]

    # A client whose clock is 16 minutes ahead; 14 minutes is still accepted.
    with freeze_time(now + timedelta(minutes=16), real_asyncio=True):
        status, error = await rejected(secured.queue("root").createTask(task_id, body))
    assert status == 401 and "check the client's clock" in error["message"]
    assert not await secured.exists(task_id)
    with freeze_time(now + timedelta(minutes=14), real_asyncio=True):
        created = await secured.queue("root").createTask(task_id, body)
    assert created["status"]["state"] == "pending"


async def test_reads_need_no_credentials_and_ignore_bad_ones(secured: Secured) -> None:
    task_id = await secured.create()
    stale = secured.as_({**secured.creds["root"], "accessToken": "stale"})
    assert (await stale.status(task_id))["status"]["taskId"] == task_id
    assert (await stale.task(task_id))["provisionerId"] == PROV
    assert (await secured.queue().pendingTasks(POOL))["pendingTasks"] == 1
    assert (await stale.ping())["alive"] is True


# --- 403 and its absence ----------------------------------------------------------------------


async def test_create_task_priority_ladder(secured: Secured) -> None:
    """A scope for a priority also allows every lower one, never a higher one."""
    highest, low = secured.queue("creator/highest"), secured.queue("creator/low")
    for priority in ("highest", "high", "low", "lowest", "normal"):
        result = await highest.createTask(slugid.nice(), secured.definition(priority=priority))
        assert result["status"]["state"] == "pending", priority
    for priority in ("low", "very-low", "lowest", "normal"):
        result = await low.createTask(slugid.nice(), secured.definition(priority=priority))
        assert result["status"]["state"] == "pending", priority
    task_id = slugid.nice()
    status, error = await rejected(low.createTask(task_id, secured.definition(priority="high")))
    assert status == 403
    assert "Client ID creator/low does not have sufficient scopes" in error["message"]
    assert json.loads(missing_scopes(error)) == {
        "AnyOf": [
            f"queue:create-task:highest:{POOL}",
            f"queue:create-task:very-high:{POOL}",
            f"queue:create-task:high:{POOL}",
        ]
    }
    assert not await secured.exists(task_id)
    # The ladder is per worker pool.
    other = secured.definition(priority="lowest", workerType="other")
    status, error = await rejected(highest.createTask(slugid.nice(), other))
    assert status == 403 and f"queue:create-task:highest:{PROV}/other" in missing_scopes(error)


async def test_each_route_needs_its_scope(secured: Secured) -> None:
    routes = secured.queue("creator/routes")
    ok = secured.definition(routes=["index.project.a", "index.project.b.c"])
    assert (await routes.createTask(slugid.nice(), ok))["status"]["state"] == "pending"
    task_id = slugid.nice()
    bad = secured.definition(routes=["index.project.a", "notify.email.x@example.com.on-failed"])
    status, error = await rejected(routes.createTask(task_id, bad))
    assert status == 403
    assert missing_scopes(error) == "queue:route:notify.email.x@example.com.on-failed"
    assert not await secured.exists(task_id)
    # A client without any route scope may still create tasks without routes.
    plain = await secured.queue("creator/low").createTask(slugid.nice(), secured.definition())
    assert plain["status"]["state"] == "pending"
    status, error = await rejected(secured.queue("creator/low").createTask(slugid.nice(), ok))
    assert status == 403
    assert json.loads(missing_scopes(error)) == {
        "AllOf": ["queue:route:index.project.a", "queue:route:index.project.b.c"]
    }


async def test_the_caller_must_hold_every_task_scope(secured: Secured) -> None:
    delegating = secured.queue("creator/delegating")
    held = secured.definition(scopes=["secrets:get:project/build", "docker-worker:cache:build"])
    assert (await delegating.createTask(slugid.nice(), held))["status"]["state"] == "pending"
    task_id = slugid.nice()
    too_much = secured.definition(scopes=["secrets:get:project/build", "secrets:get:other/x"])
    status, error = await rejected(delegating.createTask(task_id, too_much))
    assert status == 403 and missing_scopes(error) == "secrets:get:other/x"
    # A task scope ending in * needs a held scope covering the whole prefix.
    wildcard = secured.definition(scopes=["secrets:get:*"])
    status, error = await rejected(delegating.createTask(task_id, wildcard))
    assert status == 403 and missing_scopes(error) == "secrets:get:*"
    assert not await secured.exists(task_id)


async def test_producer_and_worker_endpoints_require_their_scopes(secured: Secured) -> None:
    in_group = await secured.create()
    elsewhere = await secured.create(taskGroupId=slugid.nice())
    producer = secured.queue("producer/group")

    canceled = await producer.cancelTask(in_group)
    assert canceled["status"]["state"] == "exception"
    status, error = await rejected(producer.cancelTask(elsewhere))
    other_group = (await secured.queue().task(elsewhere))["taskGroupId"]
    assert status == 403 and json.loads(missing_scopes(error)) == {
        "AnyOf": [
            f"queue:cancel-task:-/{other_group}/{elsewhere}",
            "queue:cancel-task-in-project:none",
        ]
    }
    status, error = await rejected(producer.scheduleTask(in_group))
    assert status == 403 and f"queue:schedule-task:-/{GROUP}/{in_group}" in missing_scopes(error)
    rerun = await producer.rerunTask(in_group)
    assert rerun["status"]["runs"][-1]["reasonCreated"] == "rerun"

    worker, stranger = secured.queue("worker"), secured.queue("worker/other-pool")
    status, error = await rejected(
        worker.claimTask(elsewhere, "0", {"workerGroup": "other", "workerId": "w1"})
    )
    assert status == 403 and missing_scopes(error) == "queue:worker-id:other/w1"
    status, error = await rejected(stranger.claimTask(elsewhere, "0", WORKER))
    assert status == 403 and missing_scopes(error) == f"queue:claim-task:{POOL}"
    status, error = await rejected(stranger.claimWork(POOL, {**WORKER, "tasks": 1}))
    assert status == 403 and missing_scopes(error) == f"queue:claim-work:{POOL}"
    assert await secured.state(elsewhere) == ("pending",)
    claim = await worker.claimTask(elsewhere, "0", WORKER)
    assert claim["status"]["state"] == "running"
    # A worker's own credentials do not resolve runs: the claim's credentials do.
    status, error = await rejected(worker.reportCompleted(elsewhere, "0"))
    assert status == 403 and missing_scopes(error) == f"queue:resolve-task:{elsewhere}/0"


# --- temporary credentials of a claim -------------------------------------------------------


async def test_claim_credentials_cover_their_run_and_nothing_else(secured: Secured) -> None:
    mine = await secured.create(scopes=["secrets:get:project/build"])
    other = await secured.create()
    worker = secured.queue("worker")
    claim = await worker.claimTask(mine, "0", WORKER)
    assert certificate(claim["credentials"])["scopes"] == [
        f"queue:reclaim-task:{mine}/0",
        f"queue:resolve-task:{mine}/0",
        f"queue:create-artifact:{mine}/0",
        "secrets:get:project/build",
    ]
    run = secured.as_(claim["credentials"])
    reclaimed = await run.reclaimTask(mine, "0")
    assert reclaimed["status"]["state"] == "running"

    refused = {
        f"queue:reclaim-task:{other}/0": run.reclaimTask(other, "0"),
        f"queue:resolve-task:{other}/0": run.reportCompleted(other, "0"),
        f"queue:cancel-task:-/{GROUP}/{mine}": run.cancelTask(mine),
        f"queue:rerun-task:-/{GROUP}/{mine}": run.rerunTask(mine),
        f"queue:create-task:lowest:{POOL}": run.createTask(slugid.nice(), secured.definition()),
        f"queue:claim-task:{POOL}": run.claimTask(other, "0", WORKER),
    }
    for scope, call in refused.items():
        status, error = await rejected(call)
        assert status == 403 and scope in missing_scopes(error), (scope, error)
    assert await secured.state(other) == ("pending",)

    # Resolving the run with worker-shutdown makes run 1; run 0's credentials can't touch it.
    retried = await run.reportException(mine, "0", {"reason": "worker-shutdown"})
    assert [r["state"] for r in retried["status"]["runs"]] == ["exception", "pending"]
    claim_1 = await worker.claimTask(mine, "1", WORKER)
    for scope, call in {
        f"queue:reclaim-task:{mine}/1": run.reclaimTask(mine, "1"),
        f"queue:resolve-task:{mine}/1": run.reportCompleted(mine, "1"),
    }.items():
        status, error = await rejected(call)
        assert status == 403 and missing_scopes(error) == scope
    assert await secured.state(mine) == ("exception", "running")
    done = await secured.as_(claim_1["credentials"]).reportCompleted(mine, "1")
    assert done["status"]["state"] == "completed"


async def test_claim_credentials_expire_at_taken_until(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    """The certificate's expiry is the run's takenUntil; Taskcluster accepts it up to 5
    minutes later. Time moves on the coordinator's clock (credentials are verified on the
    clock they were issued on); resolvers are off so the run stays running throughout."""
    clock = FakeClock()
    coordinator, creds = await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        CLIENTS,
        clock=clock,
        claim_timeout_ms=60_000,
        run_resolvers=False,
    )
    secured = Secured(coordinator=coordinator, creds=creds, clock=clock)
    t0 = clock.now
    task_id = await secured.create()
    claim = await secured.queue("worker").claimTask(task_id, "0", WORKER)
    issued = certificate(claim["credentials"])
    assert issued["expiry"] == from_iso(claim["takenUntil"]) == t0 + 60_000
    assert issued["start"] == t0

    clock.advance(30)
    reclaimed = await secured.as_(claim["credentials"]).reclaimTask(task_id, "0")
    assert certificate(reclaimed["credentials"])["expiry"] == t0 + 90_000

    clock.advance(60 + 300 + 1 - 30)  # one second past the first credentials' grace
    status, error = await rejected(secured.as_(claim["credentials"]).reportCompleted(task_id, "0"))
    assert status == 401 and "expired" in error["message"]
    assert await secured.state(task_id) == ("running",)
    # The reclaim's credentials are good until t0 + 90 s + 5 min.
    again = await secured.as_(reclaimed["credentials"]).reclaimTask(task_id, "0")
    assert from_iso(again["takenUntil"]) == clock.now + 60_000

    clock.advance(60 + 300 + 1)
    for credentials in (reclaimed["credentials"], again["credentials"]):
        status, error = await rejected(secured.as_(credentials).reportCompleted(task_id, "0"))
        assert status == 401 and "expired" in error["message"]
    assert await secured.state(task_id) == ("running",)
    # Permanent credentials still verify at this server time (12 minutes of Hawk skew).
    canceled = await secured.queue("root").cancelTask(task_id)
    assert canceled["status"]["runs"][0]["reasonResolved"] == "canceled"
