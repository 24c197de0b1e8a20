"""Fuzzing the APIs with schemathesis over the OpenAPI documents the coordinator serves.

Owns the fuzz runs: a ``queue-coordinator serve`` process (SQLite, no Azure) with
authentication off or on, seeded with real tasks in every state (for the queue's document) or
the records of a service beside it (hooks, clients and roles, index entries, secrets, with
fewer examples: their operations are simple beside the queue's), and schemathesis' engine
(examples, coverage, fuzzing and stateful phases; the queue's coverage phase only in its
signed run) against it with every check schemathesis
has: no server error; status codes, content types, headers and bodies as the document
describes them; schema-violating requests refused and schema-valid ones accepted; a 405 with
the right ``Allow`` for a method the path does not take. Every failure, and any traceback in
the coordinator's log, fails the test, with one exception, :func:`stands`: a schema-valid
request may be refused with a 400 that names what no schema can say (a deadline before
``created``, a continuationToken this API never issued, a run reported twice in one batch),
never with one about the schema; and an artifact may be an error artifact (424) or expired
(410), which is what it is, not a refusal. The run is deterministic (derandomised Hypothesis,
no example database) and bounded per operation and phase by :data:`MAX_EXAMPLES`,
:data:`MAX_SIGNED_EXAMPLES` and :data:`MAX_SERVICE_EXAMPLES`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
import slugid
from schemathesis.core.failures import Failure
from schemathesis.core.transport import Response
from schemathesis.engine import events
from schemathesis.hooks import HookContext
from schemathesis.openapi.checks import RejectedPositiveData, UseAfterFree
from yarl import URL

from coordinator.api.endpoints import (
    AUTH_PREFIX,
    HOOKS_PREFIX,
    INDEX_PREFIX,
    PURGE_CACHE_PREFIX,
    SECRETS_PREFIX,
)
from coordinator.service.clients_file import ensure_root_client
from devharness.api import call
from devharness.tasks import task_definition
from hawk_signing import Credentials, authorization
from tests.fixtures.coordinator import CoordinatorProcess, RunningCoordinator

MAX_EXAMPLES = 20
"""Examples per operation in the fuzzing phase (50 took twice as long as 30 for little more
found, and 30 kept the suite past 15 minutes once the auth service came); the coverage phase,
where it runs, adds its boundary cases on top."""
MAX_SIGNED_EXAMPLES = 5
"""The same with authentication on. The run is deterministic, so its examples are the first of
auth-off's, sent signed: what it adds is every operation's path through authentication and
the scopes its parameters make, which the coverage phase's boundary values (empty, longest,
odd characters) reach better than more random ones."""
MAX_SERVICE_EXAMPLES = 10
"""The same for the services beside the queue (hooks, auth, index, secrets, purge-cache), each
run with its coverage phase: their operations are simple beside the queue's, and with 20 the
auth service's run alone took 140 s in a suite run of 18 minutes on a slow machine."""

SCHEMA_REFUSALS = (
    "does not match the schema",
    "invalid URL parameters",
    "unknown query parameters",
    "request body is missing",
)
"""How the coordinator's 400s begin when a request breaks its schemas: a schema-valid request
refused with one of these means the OpenAPI document lets through what the API refuses."""
FIRE_REFUSAL = "task does not match the schema"
"""How a trigger's 400 begins when the hook's template (as the fuzzer last updated it)
renders a task createTask refuses: about the hook, not the request."""

SEEDED_PROBABILITY = 0.5
"""How often a path parameter is one of the seeded ids instead of a generated value: random
taskIds (hookIds) are all 404s, which reach none of the claim, reclaim and report (trigger)
paths."""

WORKER_GROUP, WORKER_ID, QUARANTINED_WORKER_ID = "fuzz-wg", "fuzz-w1", "fuzz-w2"

ARTIFACTS: dict[str, dict[str, Any]] = {
    "public/fuzz.txt": {"storageType": "s3", "contentType": "text/plain"},
    "public/ref": {
        "storageType": "reference",
        "url": "https://example.com/x",
        "contentType": "text/plain",
    },
    "public/error": {
        "storageType": "error",
        "reason": "file-missing-on-worker",
        "message": "no such file",
    },
    "public/link": {"storageType": "link", "artifact": "public/fuzz.txt"},
    "private/cycle": {"storageType": "link", "artifact": "private/cycle"},
}
"""The artifacts seeded on each running task, by name: one of each kind (the s3 one uploaded),
and a link to itself."""
ARTIFACT_ANSWERS = (410, 424)
"""What a schema-valid request for an artifact may meet besides success: an expired one, an
error artifact."""

# Each variant takes about two minutes on a quiet machine with the API's 70 operations, and
# up to 300 s on the shared two cores when other suites run beside it.
pytestmark = pytest.mark.timeout(420)


class HawkAuth(requests.auth.AuthBase):
    """Signs every request schemathesis sends as the root client, with the worker SDK's
    Hawk signing (over the final URL and body, so generated queries and bodies verify)."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        body = request.body
        try:
            content = body.decode() if isinstance(body, bytes) else str(body or "")
        except UnicodeDecodeError:
            # Unsignable as text: the server answers 401, which is still a checked answer.
            content = ""
        request.headers["Authorization"] = authorization(
            self.credentials,
            method=request.method or "GET",
            url=request.url or "",
            content=content,
            content_type=str(request.headers.get("Content-Type", "")) if content else "",
        )
        return request


Dictionaries = dict[str, list[str]]
"""Values a path parameter takes besides generated ones, by parameter name: seeded ids."""


async def seed(c: RunningCoordinator, credentials: Credentials | None) -> Dictionaries:
    """Tasks in every state (unscheduled, pending, running, completed, failed, exception), a
    sealed task group beside an open one, a quarantined worker, and :data:`ARTIFACTS` on the
    running tasks; the queue's path parameters that name them."""

    async def ok(method: str, path: str, body: Any = None) -> Any:
        response = await call(c.session, method, c.api + path, body, credentials=credentials)
        assert response.status == 200, (method, path, response.body)
        return response.body

    group, sealed_group = str(slugid.nice()), str(slugid.nice())
    worker = {"workerGroup": WORKER_GROUP, "workerId": WORKER_ID}

    async def create(**overrides: Any) -> str:
        task_id = str(slugid.nice())
        await ok("PUT", f"/task/{task_id}", task_definition(taskGroupId=group, **overrides))
        return task_id

    pending = await create()
    unscheduled = await create(dependencies=[pending])
    resolved = {}
    # Three running tasks: the fuzzer resolves some before it tries reclaim on the others.
    for outcome, body in [
        ("running", None),
        ("running-2", None),
        ("running-3", None),
        ("completed", None),
        ("failed", None),
        ("exception", {"reason": "malformed-payload"}),
    ]:
        task_id = resolved[outcome] = await create()
        await ok("POST", f"/task/{task_id}/runs/0/claim", worker)
        if not outcome.startswith("running"):
            await ok("POST", f"/task/{task_id}/runs/0/{outcome}", body)
    for outcome in ("running", "running-2", "running-3"):
        expires = {"expires": (await ok("GET", f"/task/{resolved[outcome]}"))["expires"]}
        for name, kind in ARTIFACTS.items():
            path = f"/task/{resolved[outcome]}/runs/0/artifacts/{name.replace('/', '%2F')}"
            created = await ok("POST", path, {**kind, **expires})
            if "putUrl" in created:
                async with c.session.put(
                    URL(created["putUrl"], encoded=True),
                    data=b"fuzz",
                    headers={"Content-Type": "text/plain"},
                ) as response:
                    assert response.status == 200, await response.text()
    in_sealed = str(slugid.nice())
    await ok("PUT", f"/task/{in_sealed}", task_definition(taskGroupId=sealed_group))
    await ok("POST", f"/task-group/{sealed_group}/seal")
    states = {
        (await ok("GET", f"/task/{task_id}/status"))["status"]["state"]
        for task_id in [pending, unscheduled, *resolved.values()]
    }
    assert states == {"unscheduled", "pending", "running", "completed", "failed", "exception"}

    workers = f"/provisioners/test-prov/worker-types/test-wt/workers/{WORKER_GROUP}"
    await ok(
        "PUT",
        f"/provisioners/test-prov/worker-types/test-wt/{WORKER_GROUP}/{QUARANTINED_WORKER_ID}",
        {},
    )
    await ok(
        "PUT", f"{workers}/{QUARANTINED_WORKER_ID}", {"quarantineUntil": "2100-01-01T00:00:00.000Z"}
    )
    return {
        "taskId": [pending, unscheduled, *resolved.values(), in_sealed],
        "taskGroupId": [group, sealed_group],
        "runId": ["0", "1"],
        "provisionerId": ["test-prov"],
        "workerType": ["test-wt"],
        "taskQueueId": ["test-prov/test-wt"],
        "workerGroup": [WORKER_GROUP],
        "workerId": [WORKER_ID, QUARANTINED_WORKER_ID],
        "name": list(ARTIFACTS),
    }


async def seed_hooks(c: RunningCoordinator, credentials: Credentials | None) -> Dictionaries:
    """Two hooks of one group (one with a ``/`` in its id) that take any object as trigger
    payload; the hooks service's path parameters that name them, their trigger tokens too."""
    hooks = c.url + HOOKS_PREFIX
    group, ids, tokens = "fuzz-hooks", ["nightly", "nightly/build"], []
    for hook_id in ids:
        path = f"{hooks}/hooks/{group}/{hook_id.replace('/', '%2F')}"
        body = {
            "metadata": {"name": hook_id, "description": "fuzzed", "owner": "fuzz@example.com"},
            "schedule": [],
            "task": {
                "taskQueueId": "test-prov/test-wt",
                "payload": {"firedBy": "${firedBy}"},
                "metadata": {**task_definition()["metadata"]},
            },
            "triggerSchema": {"type": "object"},
        }
        for method, suffix, payload in (("PUT", "", body), ("GET", "/token", None)):
            response = await call(
                c.session, method, path + suffix, payload, credentials=credentials
            )
            assert response.status == 200, (method, path + suffix, response.body)
        tokens.append(response.body["token"])
    return {"hookGroupId": [group], "hookId": ids, "token": tokens}


async def seed_auth(c: RunningCoordinator, credentials: Credentials | None) -> Dictionaries:
    """A role and a client (with a ``/`` in its id) assuming it; the auth service's path
    parameters that name them."""
    auth = c.url + AUTH_PREFIX
    role = {"description": "fuzzed", "scopes": ["auth:current-scopes"]}
    client = {
        "description": "fuzzed",
        "expires": "2999-01-01T00:00:00.000Z",
        "scopes": ["assume:fuzz:role"],
    }
    for path, body in (
        (f"{auth}/roles/fuzz:role", role),
        (f"{auth}/clients/fuzz%2Fclient", client),
    ):
        response = await call(c.session, "PUT", path, body, credentials=credentials)
        assert response.status == 200, (path, response.body)
    return {
        "clientId": ["fuzz/client"],
        "roleId": ["fuzz:role"],
        "entityType": ["client", "role"],
        "entityId": ["fuzz/client", "fuzz:role"],
    }


async def seed_index(c: RunningCoordinator, credentials: Credentials | None) -> Dictionaries:
    """Two entries, one a level below the other; the index service's path parameters that
    name them and their namespaces."""
    index = c.url + INDEX_PREFIX
    paths = ["fuzz.app", "fuzz.app.latest"]
    for path in paths:
        entry = {
            "taskId": "fN1SbArXTPSVFNUvaOlinQ",
            "rank": 1,
            "data": {"fuzzed": True},
            "expires": "2999-01-01T00:00:00.000Z",
        }
        response = await call(
            c.session, "PUT", f"{index}/task/{path}", entry, credentials=credentials
        )
        assert response.status == 200, (path, response.body)
    return {"indexPath": paths, "namespace": ["fuzz", *paths]}


async def seed_secrets(c: RunningCoordinator, credentials: Credentials | None) -> Dictionaries:
    """A secret whose name holds ``/``; the secrets service's path parameter that names it."""
    path = f"{c.url}{SECRETS_PREFIX}/secret/fuzz%2Fsecret"
    body = {"secret": {"fuzzed": True}, "expires": "2999-01-01T00:00:00.000Z"}
    response = await call(c.session, "PUT", path, body, credentials=credentials)
    assert response.status == 200, (path, response.body)
    return {"secretName": ["fuzz/secret"]}


async def seed_purge_cache(c: RunningCoordinator, credentials: Credentials | None) -> Dictionaries:
    """A purge request; the purge-cache service's path parameters that name its pool."""
    path = f"{c.url}{PURGE_CACHE_PREFIX}/purge-cache/fuzz-prov%2Ffuzz-wt"
    response = await call(c.session, "POST", path, {"cacheName": "fuzz"}, credentials=credentials)
    assert response.status == 204, (path, response.body)
    return {
        "taskQueueId": ["fuzz-prov/fuzz-wt"],
        "provisionerId": ["fuzz-prov"],
        "workerType": ["fuzz-wt"],
    }


def _fuzzer_crash(report: str) -> bool:
    """Whether a non-fatal error is Hypothesis failing inside its own optimiser, which
    schemathesis always runs to steer towards accepted inputs: an ``IndexError`` of
    ``ConjectureData.spans`` that depends on which answers came back, and says nothing about
    the API (the operation's fuzzing just ends early)."""
    return "hypothesis/internal/conjecture/optimiser.py" in report and "IndexError" in report


def fuzz_config(
    dictionaries: Dictionaries, *, max_examples: int, coverage: bool = True
) -> schemathesis.Config:
    """What schemathesis runs: every check, deterministic, bounded, with path parameters
    drawn from the seeded records half of the time; every phase, or all but coverage."""
    return schemathesis.Config.from_dict(
        {
            "phases": {"coverage": {"enabled": coverage}},
            "generation": {
                "max-examples": max_examples,
                "deterministic": True,
                "database": "none",
                "mode": "all",
            },
            "checks": {"enabled": True},
            "dictionaries": {name: {"values": values} for name, values in dictionaries.items()},
            "parameters": {
                f"path.{name}": {"dictionary": name, "probability": SEEDED_PROBABILITY}
                for name in dictionaries
            },
            # schemathesis rejects most values it generates for the one-segment taskQueueId of
            # /task-queues/{taskQueueId}... (a "/" that must be percent-encoded, beside the
            # static /task-queues/counts), so that health check would end those operations
            # before the seeded taskQueueId is tried.
            "suppress-health-check": ["filter_too_much"],
            "workers": 1,
            "request-timeout": 30,
        }
    )


def stands(context: HookContext, failure: Failure, case: Any, response: Response) -> bool:
    """Whether a failure counts (schemathesis' ``filter_failure`` hook): all of them, except

    * a schema-valid request refused with a 400 that is not about the schema (a trigger's
      included, :data:`FIRE_REFUSAL`), or answered what an artifact is
      (:data:`ARTIFACT_ANSWERS`);
    * one whose path parameters hold a ``%``: schemathesis sends it as it is, not as ``%25``,
      so the server reads another value (``%2C`` is a comma) than the schema-valid one drawn;
    * a use after a DELETE of a path that is not a prefix of the one used: schemathesis takes
      ``/tasks/x`` (the index's listTasks) for ``/task/x`` (deleteTask's entry), a plural
      being the same resource to it.
    """
    if isinstance(failure, UseAfterFree):
        return failure.usage.split()[-1].startswith(failure.free.split()[-1])
    if not isinstance(failure, RejectedPositiveData):
        return True
    if any("%" in str(value) for value in (case.path_parameters or {}).values()):
        return False
    if response.status_code in ARTIFACT_ANSWERS:
        return False
    if response.status_code != 400:
        return True
    message = str(response.json().get("message", ""))
    if message.startswith(FIRE_REFUSAL):
        return False
    return any(refusal in message for refusal in SCHEMA_REFUSALS)


def run_schemathesis(
    api: str, config: schemathesis.Config, credentials: Credentials | None
) -> list[str]:
    """Run every phase against the API at ``api`` and describe each failure and engine
    error."""
    schema = schemathesis.openapi.from_url(f"{api}/openapi.json", config=config)
    schema.hooks.register_hook_with_name(stands, "filter_failure")
    if credentials is not None:
        schema.auth.set_from_requests(HawkAuth(credentials))
    problems: list[str] = []
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished | events.FuzzScenarioFinished):
            for checks in event.recorder.checks.values():
                for check in checks:
                    if check.failure_info is not None:
                        failure = check.failure_info.failure
                        problems.append(
                            f"{failure.operation}: {failure.title}: {failure.message}\n"
                            f"{check.failure_info.code_sample}"
                        )
        elif isinstance(event, events.NonFatalError):
            if not _fuzzer_crash(event.info.format()):
                problems.append(f"{event.label}: {event.info.format()}")
        elif isinstance(event, events.FatalError):
            raise event.exception
        elif isinstance(event, events.EngineFinished):
            problems += [f"{f.operation}: {f.title}: {f.message}" for f in event.failures]
    return problems


@pytest.mark.slow(seconds=120)
@pytest.mark.parametrize("auth", [False, True], ids=["auth-off", "auth-on"])
async def test_no_input_reaches_a_server_error(
    coordinator_process: Callable[..., CoordinatorProcess], tmp_path: Path, auth: bool
) -> None:
    clients_file = tmp_path / "clients.json"
    credentials = None
    if auth:
        credentials = ensure_root_client(clients_file)
    # claimWork long-polls when it finds nothing (store dispatch): not for the fuzzer
    process = coordinator_process(
        auth_enabled=auth, clients_file=clients_file, claim_work_timeout_ms=0
    )
    c = await process.start()
    examples = MAX_SIGNED_EXAMPLES if auth else MAX_EXAMPLES
    # The coverage phase runs once, signed: its cases are the same in both runs
    # (deterministic), its boundary values are what make odd scopes, and generating them is
    # over a quarter of a run's CPU (the suite is CPU-bound on two cores).
    config = fuzz_config(await seed(c, credentials), max_examples=examples, coverage=auth)
    await fuzz(process, c.api, config, credentials)


Seed = Callable[[RunningCoordinator, Credentials | None], Awaitable[Dictionaries]]


@pytest.mark.parametrize(
    ("prefix", "seed_service"),
    [
        (HOOKS_PREFIX, seed_hooks),
        (AUTH_PREFIX, seed_auth),
        (INDEX_PREFIX, seed_index),
        (SECRETS_PREFIX, seed_secrets),
        (PURGE_CACHE_PREFIX, seed_purge_cache),
    ],
    ids=["hooks", "auth", "index", "secrets", "purge-cache"],
)
@pytest.mark.slow(seconds=25)
async def test_no_service_input_reaches_a_server_error(
    prefix: str,
    seed_service: Seed,
    coordinator_process: Callable[..., CoordinatorProcess],
    tmp_path: Path,
) -> None:
    """The services beside the queue, fuzzed as root (authentication on)."""
    clients_file = tmp_path / "clients.json"
    credentials = ensure_root_client(clients_file)
    process = coordinator_process(auth_enabled=True, clients_file=clients_file)
    c = await process.start()
    config = fuzz_config(await seed_service(c, credentials), max_examples=MAX_SERVICE_EXAMPLES)
    await fuzz(process, c.url + prefix, config, credentials)


async def fuzz(
    process: CoordinatorProcess,
    api: str,
    config: schemathesis.Config,
    credentials: Credentials | None,
) -> None:
    """Run schemathesis against the API at ``api``; fail on any problem it reports or any
    traceback in the coordinator's log."""
    # The engine is synchronous; a thread keeps this loop (and pytest-timeout) responsive.
    problems = await asyncio.to_thread(run_schemathesis, api, config, credentials)
    log = process.log_path.read_text(errors="replace")
    assert not problems, f"{len(problems)} failures:\n\n" + "\n\n".join(dict.fromkeys(problems))
    assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]
