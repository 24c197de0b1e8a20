"""The management API (listTasks, listTaskSummaries, countTasks, cancelTasks, deleteTasks) and
the resolved-task TTLs, on both drivers, against a coordinator in this process with an injected
clock.

The filter tests hold a small population of tasks with known attributes and check every
filter, alone and combined, against a Python model of what it should match: through the
paged listing (following continuationTokens two at a time), the NDJSON stream and the counts.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import slugid

from coordinator.domain.records import from_iso, to_iso
from coordinator.resolvers import expiry_sweeper
from coordinator.service.clock import wall_clock
from devharness.api import call
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from hawk_signing import Credentials
from tests.fixtures.clients import write_clients
from tests.fixtures.coordinator import FakeClock, RunningCoordinator, StartCoordinator

NDJSON = {"Accept": "application/x-ndjson"}
STATES = ("unscheduled", "pending", "delayed", "running", "completed", "failed", "exception")


@dataclass(kw_only=True)
class Made:
    """One task of the population and what the filters see of it."""

    task_id: str
    queue: str
    scheduler: str
    group: str
    project: str
    tags: dict[str, str]
    created: int
    state: str = "pending"
    resolved: int | None = None


@dataclass(kw_only=True)
class Population:
    c: RunningCoordinator
    clock: FakeClock
    tasks: dict[str, Made] = field(default_factory=dict)

    def matching(self, predicate: Callable[[Made], bool]) -> set[str]:
        return {t.task_id for t in self.tasks.values() if predicate(t)}


async def started(start: StartCoordinator, store_url: str, **config: Any) -> Population:
    clock = FakeClock()
    c = await start(clock=clock, run_resolvers=False, store_url=store_url, **config)
    return Population(c=c, clock=clock)


async def make(
    p: Population,
    name: str,
    *,
    queue: str,
    scheduler: str,
    group: str,
    project: str | None = None,
    tags: dict[str, str] | None = None,
    **fields: Any,
) -> Made:
    """Create a task ``name`` at the clock's now, then move the clock on a second."""
    provisioner_id, worker_type = queue.split("/")
    body = task_definition(
        p.clock.now,
        provisionerId=provisioner_id,
        workerType=worker_type,
        schedulerId=scheduler,
        taskGroupId=group,
        tags=tags or {},
        **fields,
    )
    if project is not None:
        body["projectId"] = project
    task_id = slugid.nice()
    status = (await p.c.ok("PUT", f"/task/{task_id}", body))["status"]
    made = Made(
        task_id=task_id,
        queue=queue,
        scheduler=scheduler,
        group=group,
        project=project or "none",
        tags=tags or {},
        created=p.clock.now,
        state=status["state"],
    )
    p.tasks[name] = made
    p.clock.advance(1)
    return made


async def claim(p: Population, made: Made) -> None:
    await p.c.claim(made.task_id)
    made.state = "running"


async def resolve(p: Population, made: Made, how: str) -> None:
    """Resolve a claimed task ``how`` (completed, failed, exception) at the clock's now."""
    await p.c.report(made.task_id, 0, how, "malformed-payload")
    made.state, made.resolved = how, p.clock.now
    p.clock.advance(1)


G1, G2, G3, G4 = (slugid.nice() for _ in range(4))


async def population(p: Population) -> Population:
    """Seven tasks, one in each state, spread over queues, schedulers, groups, projects,
    tags and creation times."""
    a = await make(
        p,
        "a",
        queue="mgmt/a",
        scheduler="s1",
        group=G1,
        project="proj-x",
        tags={"kind": "build", "os": "linux"},
    )
    b = await make(p, "b", queue="mgmt/a", scheduler="s1", group=G1, tags={"kind": "test"})
    c = await make(p, "c", queue="mgmt/b", scheduler="s2", group=G2, tags={"kind": "build"})
    d = await make(p, "d", queue="mgmt/b", scheduler="s2", group=G2, project="proj-x")
    e = await make(
        p,
        "e",
        queue="mgmt/a",
        scheduler="s1",
        group=G3,
        notBefore=to_iso(p.clock.now + 3_600_000),
    )
    e.state = "delayed"
    f = await make(p, "f", queue="mgmt/b", scheduler="s1", group=G3, dependencies=[a.task_id])
    assert f.state == "unscheduled"
    g = await make(p, "g", queue="mgmt/a", scheduler="s2", group=G4, tags={"kind": "build"})
    for claimed in (b, c, d, g):
        await claim(p, claimed)
    await resolve(p, c, "completed")
    await resolve(p, d, "failed")
    await resolve(p, g, "exception")
    return p


def query(**params: str | Sequence[str]) -> str:
    return urllib.parse.urlencode(params, doseq=True)


async def listed(p: Population, path: str, params: str) -> list[str]:
    """Every task id of a paged listing, two at a time, in order."""
    ids: list[str] = []
    token: str | None = None
    while True:
        page_query = params + "&limit=2" + (f"&continuationToken={token}" if token else "")
        body = await p.c.ok("GET", f"{path}?{page_query}")
        ids += [item["status"]["taskId"] for item in body["tasks"]]
        token = body.get("continuationToken")
        if token is None:
            return ids


async def streamed(p: Population, path: str, params: str) -> list[dict[str, Any]]:
    async with p.c.session.get(f"{p.c.api}{path}?{params}", headers=NDJSON) as response:
        assert response.status == 200, await response.text()
        assert response.content_type == "application/x-ndjson"
        return [json.loads(line) async for line in response.content if line.strip()]


FILTERS: list[tuple[str, dict[str, Any], Callable[[Made, dict[str, Made]], bool]]] = [
    ("queue", {"taskQueueId": "mgmt/a"}, lambda t, _: t.queue == "mgmt/a"),
    *((f"state {state}", {"state": state}, lambda t, _, s=state: t.state == s) for state in STATES),
    (
        "state pending or delayed",
        {"state": ["pending", "delayed"]},
        lambda t, _: t.state in ("pending", "delayed"),
    ),
    ("scheduler", {"schedulerId": "s2"}, lambda t, _: t.scheduler == "s2"),
    ("group", {"taskGroupId": G1}, lambda t, _: t.group == G1),
    ("project", {"projectId": "proj-x"}, lambda t, _: t.project == "proj-x"),
    ("project none", {"projectId": "none"}, lambda t, _: t.project == "none"),
    ("tag", {"tag": "kind:build"}, lambda t, _: t.tags.get("kind") == "build"),
    (
        "two tags",
        {"tag": ["kind:build", "os:linux"]},
        lambda t, _: t.tags.get("kind") == "build" and t.tags.get("os") == "linux",
    ),
    ("tag matching none", {"tag": "kind:nothing"}, lambda t, _: False),
    ("created after", {"createdAfter": "c"}, lambda t, m: t.created >= m["c"].created),
    ("created before", {"createdBefore": "c"}, lambda t, m: t.created < m["c"].created),
    (
        "created window",
        {"createdAfter": "b", "createdBefore": "e"},
        lambda t, m: m["b"].created <= t.created < m["e"].created,
    ),
    (
        "resolved after",
        {"resolvedAfter": "d"},
        lambda t, m: t.resolved is not None and t.resolved >= _resolved(m["d"]),
    ),
    (
        "resolved before",
        {"resolvedBefore": "d"},
        lambda t, m: t.resolved is not None and t.resolved < _resolved(m["d"]),
    ),
    (
        "queue and state",
        {"taskQueueId": "mgmt/b", "state": ["completed", "failed"]},
        lambda t, _: t.queue == "mgmt/b" and t.state in ("completed", "failed"),
    ),
    (
        "unresolved",
        {"state": "unresolved"},
        lambda t, _: t.state in ("unscheduled", "pending", "delayed", "running"),
    ),
    (
        "unresolved or failed",
        {"state": ["unresolved", "failed", "running"]},
        lambda t, _: t.state in ("unscheduled", "pending", "delayed", "running", "failed"),
    ),
    (
        "group and state",
        {"taskGroupId": G1, "state": "running"},
        lambda t, _: t.group == G1 and t.state == "running",
    ),
    (
        "scheduler and created",
        {"schedulerId": "s1", "createdAfter": "b"},
        lambda t, m: t.scheduler == "s1" and t.created >= m["b"].created,
    ),
    (
        "tag and queue",
        {"tag": "kind:build", "taskQueueId": "mgmt/a"},
        lambda t, _: t.tags.get("kind") == "build" and t.queue == "mgmt/a",
    ),
    (
        "project and state",
        {"projectId": "proj-x", "state": "failed"},
        lambda t, _: t.project == "proj-x" and t.state == "failed",
    ),
    (
        "everything at once",
        {
            "taskQueueId": "mgmt/a",
            "state": ["pending", "running"],
            "schedulerId": "s1",
            "taskGroupId": G1,
            "projectId": "proj-x",
            "tag": "os:linux",
            "createdAfter": "a",
            "createdBefore": "b",
        },
        lambda t, m: t.task_id == m["a"].task_id,
    ),
]


def _resolved(made: Made) -> int:
    assert made.resolved is not None
    return made.resolved


def _params(p: Population, given: dict[str, Any]) -> str:
    """The query string of a filter: times named by a task of the population are its
    created (created*) or resolved (resolved*) time."""
    params: dict[str, Any] = {}
    for name, value in given.items():
        if name.startswith("created"):
            params[name] = to_iso(p.tasks[value].created)
        elif name.startswith("resolved"):
            params[name] = to_iso(_resolved(p.tasks[value]))
        else:
            params[name] = value
    return query(**params)


async def test_every_filter_alone_and_combined_lists_streams_and_counts_what_it_should(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    p = await population(await started(start_coordinator, store_url))
    assert sorted(t.state for t in p.tasks.values()) == sorted(STATES)
    for name, given, predicate in FILTERS:
        params = _params(p, given)
        expected = p.matching(lambda t, pr=predicate: pr(t, p.tasks))  # type: ignore[misc]
        ids = await listed(p, "/tasks", params)
        assert ids == sorted(expected), name
        lines = await streamed(p, "/tasks/summary", params)
        assert [line["status"]["taskId"] for line in lines] == sorted(expected), name
        for line in lines:
            assert "payload" not in line["task"] and "extra" not in line["task"], name
        counts = await p.c.ok("GET", f"/tasks/count?{params}")
        assert counts["total"] == len(expected), name
        assert counts["states"] == {
            state: sum(1 for t in p.tasks.values() if t.task_id in expected and t.state == state)
            for state in STATES
        }, name


async def test_a_listing_carries_definitions_and_statuses_and_a_summary_leaves_out_the_payload(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    p = await started(start_coordinator, store_url)
    made = await make(p, "x", queue="mgmt/a", scheduler="s1", group=G1, payload={"big": "x" * 100})
    full = await p.c.ok("GET", f"/tasks?taskGroupId={G1}")
    [item] = full["tasks"]
    assert item["task"] == await p.c.ok("GET", f"/task/{made.task_id}")
    assert item["status"] == await p.c.status(made.task_id)
    summary = await p.c.ok("GET", f"/tasks/summary?taskGroupId={G1}")
    expected = {k: v for k, v in item["task"].items() if k not in ("payload", "extra")}
    assert summary["tasks"] == [{"status": item["status"], "task": expected}]
    assert "continuationToken" not in full


async def test_continuation_tokens_are_bound_to_their_query_and_cannot_be_forged(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    p = await started(start_coordinator, store_url)
    for n in range(3):
        await make(p, f"t{n}", queue="mgmt/a", scheduler="s1", group=G1)
    first = await p.c.ok("GET", "/tasks?taskQueueId=mgmt%2Fa&limit=1")
    token = first["continuationToken"]
    # the same query may change its limit
    second = await p.c.ok("GET", f"/tasks?taskQueueId=mgmt%2Fa&limit=5&continuationToken={token}")
    assert len(second["tasks"]) == 2
    # parameters in another order are the same query
    await p.c.ok("GET", f"/tasks?limit=1&continuationToken={token}&taskQueueId=mgmt%2Fa")
    encoded, mac = token.split(".")
    forged_key = encoded[:-1] + ("A" if encoded[-1] != "A" else "B")
    flipped_mac = mac[:-1] + ("A" if mac[-1] != "A" else "B")
    for path in (
        f"/tasks?taskQueueId=mgmt%2Fb&continuationToken={token}",
        f"/tasks?taskQueueId=mgmt%2Fa&state=pending&continuationToken={token}",
        f"/tasks/summary?taskQueueId=mgmt%2Fa&continuationToken={token}",
        f"/task-group/{G1}/list?continuationToken={token}",
        f"/tasks?taskQueueId=mgmt%2Fa&continuationToken={forged_key}.{mac}",
        f"/tasks?taskQueueId=mgmt%2Fa&continuationToken={encoded}.{flipped_mac}",
        f"/tasks?taskQueueId=mgmt%2Fa&continuationToken={encoded}",
    ):
        response = await p.c.call("GET", path)
        assert response.status == 400, (path, response.body)
        assert "continuationToken" in response.body["message"], response.body
    group_page = await p.c.ok("GET", f"/task-group/{G1}/list?limit=1")
    group_token = group_page["continuationToken"]
    response = await p.c.call("GET", f"/tasks?taskQueueId=mgmt%2Fa&continuationToken={group_token}")
    assert response.status == 400, response.body


async def test_replicas_on_one_database_continue_each_other_s_listings(
    start_coordinator: StartCoordinator, postgres_schema_url: str
) -> None:
    one = await started(start_coordinator, postgres_schema_url)
    two = await start_coordinator(store_url=postgres_schema_url, run_resolvers=False)
    for n in range(3):
        await make(one, f"t{n}", queue="mgmt/a", scheduler="s1", group=G1)
    token = (await one.c.ok("GET", "/tasks?schedulerId=s1&limit=1"))["continuationToken"]
    rest = await two.ok("GET", f"/tasks?schedulerId=s1&continuationToken={token}")
    assert len(rest["tasks"]) == 2


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ("createdAfter=yesterday", "createdAfter"),
        ("resolvedBefore=2026-13-01T00:00:00Z", "resolvedBefore"),
        ("state=lost", "state"),
        ("state=lost", "lost"),
        ("tag=nocolon", "tag"),
        ("tag=:value", "tag"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("taskQueueId=nodash", "taskQueueId"),
        ("schedulerId=a&schedulerId=b", "schedulerId"),
        ("status=pending", "unknown query parameters"),
        ("continuationToken=bm90IGEgdG9rZW4", "continuationToken"),
        ("continuationToken=%E2%9C%93", "continuationToken"),
    ],
)
async def test_bad_filters_are_a_400_that_says_what_was_wrong(
    start_coordinator: StartCoordinator, tmp_path: Path, params: str, fragment: str
) -> None:
    c = await start_coordinator(run_resolvers=False)
    for path in ("/tasks", "/tasks/summary", "/tasks/count"):
        if path == "/tasks/count" and params.startswith(("limit", "continuationToken")):
            continue  # counts take no paging parameters: a 400 for another reason
        response = await c.call("GET", f"{path}?{params}")
        assert response.status == 400, (path, params, response.body)
        assert response.body["code"] == "InputValidationError", response.body
        assert fragment in response.body["message"], response.body


async def test_an_ndjson_listing_takes_no_paging_parameters(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(run_resolvers=False)
    async with c.session.get(f"{c.api}/tasks?schedulerId=s1&limit=5", headers=NDJSON) as r:
        assert r.status == 400
        assert "NDJSON" in (await r.json())["message"]


async def test_cancel_tasks_cancels_the_unresolved_matches_only(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    p = await population(await started(start_coordinator, store_url))
    body = await p.c.ok("POST", "/tasks/cancel?taskQueueId=mgmt%2Fa")
    # a (pending), b (running) and e (delayed) are mgmt/a's unresolved tasks; g is resolved
    assert body == {"cancelled": 3}
    for name in ("a", "b", "e"):
        status = await p.c.status(p.tasks[name].task_id)
        assert status["state"] == "exception", name
        assert status["runs"][-1]["reasonResolved"] == "canceled", name
    assert await p.c.ok("POST", "/tasks/cancel?taskQueueId=mgmt%2Fa") == {"cancelled": 0}
    assert await p.c.ok("POST", "/tasks/cancel?state=completed") == {"cancelled": 0}
    f = await p.c.status(p.tasks["f"].task_id)
    assert f["state"] == "unscheduled", "other queues are untouched"


async def test_delete_tasks_removes_the_matches_their_tags_and_edges(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    p = await population(await started(start_coordinator, store_url))
    assert await p.c.ok("DELETE", "/tasks?tag=kind%3Abuild") == {"deleted": 3}
    for name in ("a", "c", "g"):
        response = await p.c.call("GET", f"/task/{p.tasks[name].task_id}/status")
        assert response.status == 404, name
    assert (await p.c.ok("GET", "/tasks/count?tag=kind%3Abuild"))["total"] == 0
    assert (await p.c.ok("GET", "/tasks/count?tag=os%3Alinux"))["total"] == 0
    # f depends on a: the edge went with a, though f stays
    store = p.c.parts.store
    assert (await store.dependents(p.tasks["a"].task_id, limit=10, after=None)).items == []
    assert (await p.c.ok("GET", "/tasks/count?schedulerId=s1"))["total"] == 3
    assert await p.c.ok("DELETE", "/tasks?tag=kind%3Abuild") == {"deleted": 0}


async def test_a_worker_holding_a_run_of_a_deleted_task_gets_404_on_reclaim_and_report(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    p = await started(start_coordinator, store_url)
    made = await make(p, "x", queue="mgmt/a", scheduler="s1", group=G1)
    await claim(p, made)
    assert await p.c.ok("DELETE", f"/tasks?taskGroupId={G1}") == {"deleted": 1}
    for path in ("reclaim", "completed"):
        response = await p.c.call("POST", f"/task/{made.task_id}/runs/0/{path}")
        assert response.status == 404, (path, response.body)
        assert response.body["code"] == "ResourceNotFound"


async def test_bulk_cancel_and_delete_refuse_an_empty_filter_and_need_their_scopes(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    path = tmp_path / "clients.json"
    creds = write_clients(
        path,
        {
            "canceller": ["queue:manage:cancel-tasks"],
            "deleter": ["queue:manage:delete-tasks"],
        },
    )
    c = await start_coordinator(auth_enabled=True, clients_file=path, run_resolvers=False)

    async def as_(client: str | None, method: str, target: str) -> tuple[int, Any]:
        credentials = None if client is None else Credentials.from_json(creds[client])
        response = await call(c.session, method, c.api + target, credentials=credentials)
        return response.status, response.body

    for method, target, allowed, other in (
        ("POST", "/tasks/cancel", "canceller", "deleter"),
        ("DELETE", "/tasks", "deleter", "canceller"),
    ):
        status, body = await as_(allowed, method, target)
        assert status == 400 and "needs at least one filter" in body["message"], body
        status, body = await as_(allowed, method, target + "?schedulerId=s1")
        assert status == 200, body
        status, body = await as_(other, method, target + "?schedulerId=s1")
        assert (status, body["code"]) == (403, "InsufficientScopes"), body
        status, body = await as_(None, method, target + "?schedulerId=s1")
        assert (status, body["code"]) == (401, "AuthenticationFailed"), body
    # reads stay open
    status, _ = await as_(None, "GET", "/tasks?schedulerId=s1")
    assert status == 200


async def test_resolved_ttls_delete_resolved_tasks_early_each_by_its_state(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    p = await population(
        await started(start_coordinator, store_url, completed_ttl_ms=60_000, failed_ttl_ms=120_000)
    )
    management = p.c.parts.management
    c, d, g = p.tasks["c"], p.tasks["d"], p.tasks["g"]
    start = p.clock.now

    async def present() -> set[str]:
        found = await p.c.ok("GET", "/tasks?state=completed&state=failed&state=exception")
        return {item["status"]["taskId"] for item in found["tasks"]}

    p.clock.now = _resolved(c) + 60_000 - 1
    assert await expiry_sweeper.run_once(management) == 0
    p.clock.now = _resolved(c) + 60_000
    assert await expiry_sweeper.run_once(management) == 1
    assert await present() == {d.task_id, g.task_id}
    p.clock.now = _resolved(d) + 120_000
    assert await expiry_sweeper.run_once(management) == 1
    assert await present() == {g.task_id}
    p.clock.now = _resolved(g) + 120_000
    assert await expiry_sweeper.run_once(management) == 1
    assert await present() == set()
    # the unresolved tasks stay, however long
    p.clock.now = start + 30 * 86_400_000
    assert await expiry_sweeper.run_once(management) == 0
    assert (await p.c.ok("GET", "/tasks/count?schedulerId=s1"))["total"] == 4


async def test_without_ttls_resolved_tasks_stay_until_they_expire(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    p = await population(await started(start_coordinator, store_url))
    p.clock.advance(86_400)
    assert await expiry_sweeper.run_once(p.c.parts.management) == 0
    assert (await p.c.ok("GET", "/tasks/count?state=completed"))["total"] == 1


async def test_a_task_past_its_ttl_is_gone_within_a_few_resolver_intervals(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(resolver_interval_ms=200, completed_ttl_ms=500)
    task_id = await c.create()
    await c.claim(task_id, worker_id="w")
    resolved = from_iso((await c.report(task_id, 0, "completed"))["runs"][0]["resolved"])

    async def gone() -> bool:
        return (await c.call("GET", f"/task/{task_id}/status")).status == 404

    await wait_until(gone, within=10, what="the completed task deleted by its TTL")
    # deleted after its TTL, and within a few intervals of it
    assert wall_clock() - resolved >= 500
    assert wall_clock() - resolved < 500 + 10 * 200 + 2_000
