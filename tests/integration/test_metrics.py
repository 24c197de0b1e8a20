"""``GET /metrics``: exact counter values after a known sequence of API calls, the per-queue
gauges, hint and resolver counters, and one registry per app."""

from __future__ import annotations

from pathlib import Path

import slugid
from prometheus_client.parser import text_string_to_metric_families

from devharness.api import call
from devharness.azurite import AzuriteProcess
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from hawk_signing import Credentials
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.clients import start_secured
from tests.fixtures.coordinator import WORKER, FakeClock, RunningCoordinator, StartCoordinator

QUEUE = {"provisionerId": "test-prov", "workerType": "test-wt"}


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


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
    coordinator, clients = await start_secured(start_coordinator, tmp_path / "clients.json", {})
    root = Credentials.from_json(clients["root"])

    async def signed(method: str, path: str, body: object = None) -> int:
        response = await call(
            coordinator.session, method, coordinator.api + path, body, credentials=root
        )
        return response.status

    ids = [slugid.nice() for _ in range(5)]
    for task_id in ids:
        assert await signed("PUT", f"/task/{task_id}", task_definition()) == 200
    for task_id in ids[:3]:
        assert await signed("POST", f"/task/{task_id}/runs/0/claim", WORKER) == 200
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
    # no hint was put: this coordinator dispatches from its store
    assert value(samples, "queue_hints_put_total") == 0
    # the three claims' pending times, claimed within seconds of becoming visible
    pending = "queue_pending_seconds_bucket"
    assert value(samples, "queue_pending_seconds_count", **QUEUE) == 3
    assert value(samples, pending, **QUEUE, le="10.0") == 3

    # ids[2] is claimed, ids[4] pending: the gauges show them within the refresh interval
    async def gauges_caught_up() -> bool:
        samples = await scrape(coordinator)
        pending = value(samples, "queue_pending_tasks", **QUEUE)
        claimed = value(samples, "queue_claimed_tasks", **QUEUE)
        return (pending, claimed) == (1, 1)

    await wait_until(gauges_caught_up, within=15, interval=0.5, what="1 pending and 1 claimed")


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
    task_id = await coordinator.create(now_ms=clock.now)
    await coordinator.create(now_ms=clock.now)
    await coordinator.claim(task_id)
    # hint confirmations wait a second of real time, and the clock is about to jump past the
    # hint keeper's grace: written now, or the keeper would put the second task's hint again
    await coordinator.parts.service.hints.flush()
    clock.advance(1300)  # past the 1,200 s claim: the claim resolver expires it and retries
    samples: Samples = {}

    async def claim_expired() -> bool:
        nonlocal samples
        samples = await scrape(coordinator)
        # the run is counted inside the resolver's pass, the action once the pass is over
        return bool(
            value(samples, "queue_exception_tasks_total", reasonResolved="claim-expired")
            and value(samples, "queue_resolver_actions_total", resolver="claim-resolver")
        )

    await wait_until(claim_expired, within=15, interval=0.2, what="an expired claim counted")
    assert value(samples, "queue_exception_tasks_total", reasonResolved="claim-expired") == 1
    assert value(samples, "queue_resolver_actions_total", resolver="claim-resolver") == 1
    # two first runs and the retry of the expired one
    assert value(samples, "queue_hints_put_total") == 3
    assert value(samples, "queue_hint_put_failures_total") == 0
    assert value(await scrape(other), "queue_hints_put_total") == 0
