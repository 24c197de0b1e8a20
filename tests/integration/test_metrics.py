"""``GET /metrics``: exact counter values after a known sequence of API calls, the per-queue
gauges, hint and resolver counters, and one registry per app."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import slugid
from prometheus_client.parser import text_string_to_metric_families

from devharness.api import call
from devharness.azurite import AzuriteProcess
from hawk_signing import Credentials
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.coordinator import (
    FakeClock,
    RunningCoordinator,
    StartCoordinator,
    task_definition,
)

ROOT = Credentials(client_id="root", access_token="root-token")
WORKER_BODY = {"workerGroup": "wg", "workerId": "w1"}
QUEUE = {"provisionerId": "test-prov", "workerType": "test-wt"}


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def write_root_client(path: Path) -> Path:
    path.write_text(
        json.dumps(
            {
                "issuer": "root",
                "clients": [{"clientId": "root", "accessToken": "root-token", "scopes": ["*"]}],
            }
        )
    )
    path.chmod(0o600)
    return path


async def scrape(
    coordinator: RunningCoordinator,
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``/metrics`` by (name, labels)."""
    async with coordinator.session.get(coordinator.url + "/metrics") as response:
        assert response.status == 200
        assert response.content_type == "text/plain"
        text = await response.text()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, metric: str, /, **labels: str) -> float:
    return samples.get((metric, frozenset(labels.items())), 0.0)


async def test_counters_after_a_known_sequence(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator = await start_coordinator(
        auth_enabled=True, clients_file=write_root_client(tmp_path / "clients.json")
    )

    async def signed(method: str, path: str, body: object = None) -> int:
        response = await call(
            coordinator.session, method, coordinator.api + path, body, credentials=ROOT
        )
        return response.status

    ids = [slugid.nice() for _ in range(5)]
    for task_id in ids:
        assert await signed("PUT", f"/task/{task_id}", task_definition()) == 200
    for task_id in ids[:3]:
        assert await signed("POST", f"/task/{task_id}/runs/0/claim", WORKER_BODY) == 200
    assert await signed("POST", f"/task/{ids[0]}/runs/0/completed") == 200
    assert await signed("POST", f"/task/{ids[1]}/runs/0/failed") == 200
    assert await signed("POST", f"/task/{ids[3]}/cancel") == 200
    anonymous = await coordinator.call("POST", f"/task/{ids[4]}/cancel")
    assert anonymous.status == 401
    assert (await coordinator.call("GET", f"/task/{ids[4]}/status")).status == 200

    samples = await scrape(coordinator)
    assert value(samples, "queue_completed_tasks_total") == 1
    assert value(samples, "queue_failed_tasks_total") == 1
    assert value(samples, "queue_exception_tasks_total", reasonResolved="canceled") == 1
    assert value(samples, "auth_failure_total") == 1
    requests = "http_requests_total"
    assert value(samples, requests, method="PUT", name="createTask", status="200") == 5
    assert value(samples, requests, method="POST", name="claimTask", status="200") == 3
    assert value(samples, requests, method="POST", name="cancelTask", status="200") == 1
    assert value(samples, requests, method="POST", name="cancelTask", status="401") == 1
    assert value(samples, requests, method="GET", name="status", status="200") == 1
    assert value(samples, "http_request_duration_seconds_count", name="createTask") == 5
    # no hint was put: this coordinator runs without Azure
    assert value(samples, "queue_hints_put_total") == 0

    # ids[2] is claimed, ids[4] pending: the gauges show them within the refresh interval
    deadline = time.monotonic() + 15
    while True:
        samples = await scrape(coordinator)
        pending = value(samples, "queue_pending_tasks", **QUEUE)
        claimed = value(samples, "queue_claimed_tasks", **QUEUE)
        if (pending, claimed) == (1, 1) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    assert (pending, claimed) == (1, 1)


async def test_hints_resolver_actions_and_one_registry_per_app(
    start_coordinator: StartCoordinator, azurite: AzuriteProcess, azure_namespace: AzureNamespace
) -> None:
    clock = FakeClock()
    coordinator = await start_coordinator(
        clock=clock,
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
    )
    other = await start_coordinator()
    task_id = await coordinator.create(**task_definition(clock.now))
    await coordinator.create(**task_definition(clock.now))
    claimed = await coordinator.call("POST", f"/task/{task_id}/runs/0/claim", WORKER_BODY)
    assert claimed.status == 200
    # hint confirmations wait a second of real time, and the clock is about to jump past the
    # hint keeper's grace: written now, or the keeper would put the second task's hint again
    await coordinator.parts.service.hints.flush()
    clock.advance(1300)  # past the 1,200 s claim: the claim resolver expires it and retries
    deadline = time.monotonic() + 15
    while True:
        samples = await scrape(coordinator)
        expired = value(samples, "queue_exception_tasks_total", reasonResolved="claim-expired")
        if expired or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert expired == 1
    assert value(samples, "queue_resolver_actions_total", resolver="claim-resolver") == 1
    # two first runs and the retry of the expired one
    assert value(samples, "queue_hints_put_total") == 3
    assert value(samples, "queue_hint_put_failures_total") == 0
    assert value(await scrape(other), "queue_hints_put_total") == 0
