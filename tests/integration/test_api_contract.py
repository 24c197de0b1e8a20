"""What the HTTP layer promises beyond each method's own behaviour, on a real coordinator:

- every 405 carries ``Allow``, listing the methods of the route (RFC 9110), and a path without
  placeholders is its own resource (``GET /task-queues/counts`` is a 405, not getTaskQueue);
- a method with a request body refuses a request without one (declareWorker takes ``{}``);
- a repeatable query parameter is refused past the number of values the document allows;
- a handler that leaves its endpoint's declared scopes unchecked is a 500, never a success.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import pytest

from coordinator.api.endpoints import API_PREFIX
from coordinator.api.pipeline import HANDLERS
from coordinator.api.services import ENDPOINTS
from coordinator.api.tasks import TaskHandlers
from tests.fixtures.coordinator import StartCoordinator

VALUES = {
    "taskId": "fN1SbArXTPSVFNUvaOlinQ",
    "taskGroupId": "fN1SbArXTPSVFNUvaOlinQ",
    "runId": "0",
    "provisionerId": "prov",
    "workerType": "wt",
    "taskQueueId": "prov%2Fwt",
    "workerGroup": "wg",
    "workerId": "w1",
    "name": "public%2Flogs%2Flive.log",
    "rowId": "1",
}
"""A valid value of each path parameter, percent-encoded."""


def _routes() -> dict[str, set[str]]:
    """Every route of the table, percent-encoded with :data:`VALUES`, and its methods."""
    routes: dict[str, set[str]] = {}
    for endpoint in ENDPOINTS:
        path = endpoint.route
        for name in endpoint.path_parameters:
            path = path.replace(f"{{{name}}}", VALUES[name])
        routes.setdefault(path, set()).add(endpoint.method)
    return routes


async def test_every_405_lists_the_methods_of_its_route(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    routes = _routes()
    assert len(routes) > 35
    for path, methods in routes.items():
        async with c.session.request("TRACE", c.api + path) as response:
            body = await response.json()
            assert response.status == 405, (path, body)
            assert response.headers["Allow"] == ", ".join(sorted(methods)), path
            assert body["code"] == "MethodNotAllowed", body


async def test_a_concrete_path_is_not_a_templated_ones_value(
    start_coordinator: StartCoordinator,
) -> None:
    """``/task-queues/counts`` also matches getTaskQueue's ``/task-queues/{taskQueueId}``; as
    in OpenAPI, the concrete path wins: only POST is served there."""
    c = await start_coordinator()
    for method in ("GET", "OPTIONS", "DELETE", "PATCH"):
        async with c.session.request(method, c.api + "/task-queues/counts") as response:
            assert response.status == 405, await response.text()
            assert response.headers["Allow"] == "POST"
    counted = await c.ok("POST", "/task-queues/counts", {"taskQueueIds": ["prov/wt"]})
    assert counted["taskQueueCounts"][0]["pending"] == 0


async def test_declare_worker_needs_a_body(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    path = "/provisioners/prov/worker-types/wt/wg/w1"
    async with c.session.put(c.api + path) as response:
        body = await response.json()
    assert response.status == 400, body
    assert body["code"] == "InputValidationError"
    assert body["message"].startswith("request body is missing: declareWorker takes a JSON")
    assert "update-worker-request" in body["message"]
    declared = await c.ok("PUT", path, {})
    assert (declared["workerGroup"], declared["workerId"]) == ("wg", "w1")


async def test_a_body_missing_where_an_empty_object_is_not_enough_says_what_is_needed(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    async with c.session.post(c.api + "/claim-work/prov/wt") as response:
        body = await response.json()
    assert response.status == 400, body
    assert body["message"].startswith("request body is missing; body does not match the schema")
    assert "'workerGroup' is a required property" in body["message"]


@pytest.mark.parametrize(("tags", "status"), [(3, 200), (4, 400)])
async def test_a_repeatable_parameter_is_refused_past_its_limit(
    start_coordinator: StartCoordinator, tags: int, status: int
) -> None:
    c = await start_coordinator()
    query = "&".join(f"tag=k{i}:v" for i in range(tags))
    response = await c.call("GET", f"/tasks/count?{query}")
    assert response.status == status, response.body
    if status == 400:
        assert "query parameter tag is given 4 times: at most 3" in response.body["message"]


async def test_declared_scopes_left_unchecked_are_a_500(
    start_coordinator: StartCoordinator, caplog: pytest.LogCaptureFixture
) -> None:
    c = await start_coordinator()
    group = "fN1SbArXTPSVFNUvaOlinQ"
    await c.create(taskGroupId=group)
    handlers = c.app[HANDLERS][TaskHandlers] if c.app is not None else None
    assert handlers is not None

    async def unchecked(request: Any, body: Any) -> dict[str, Any]:
        return {"taskGroupId": group}

    handlers.sealTaskGroup = unchecked  # type: ignore[attr-defined]
    with caplog.at_level(logging.ERROR):
        response = await c.call("POST", f"/task-group/{group}/seal")
    assert response.status == 500, response.body
    assert response.body["code"] == "InternalServerError"
    assert [
        str(record.exc_info[1])
        for record in caplog.records
        if record.exc_info and isinstance(record.exc_info[1], RuntimeError)
    ] == ["sealTaskGroup declares scopes its handler never checked"]


async def test_an_oversized_query_is_a_json_400(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    async with aiohttp.ClientSession() as session:
        url = f"{c.url}{API_PREFIX}/tasks/count?tag=k:{'v' * 9000}"
        async with session.get(url) as response:
            assert response.status == 400
            body = await response.json()
    assert body["code"] == "InputError" and "could not be parsed" in body["message"]
