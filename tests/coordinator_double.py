"""Test double of the coordinator's worker-facing routes and of Azure's queue REST API.

Not a test module: the worker SDK's tests import it. It exists because it can do what the
real coordinator and Azurite cannot be made to do on cue: answer 503 to a poll or a report,
refuse one run of a batch, drop a connection, keep a message's DequeueCount high, refuse a
delete, hand out URLs that expire in seconds, lack the batch routes or the release URLs as an
older coordinator does (``batch_routes = False``, ``release_urls = False``), and count every
request. Behaviour the real system produces on demand (priority order, outcomes, claimWork,
reclaims, a canceled task, shutdown) is tested against it in tests/integration/test_sdk_real.py.

What it checks of the worker, strictly: Hawk signatures (the worker's credentials for
pollTaskUrls, claims and the batch routes, the run's latest temporary credentials,
certificate in ``ext``, for single reclaims, reports and createArtifact); batches of 1 to 32
distinct runs, with a report's ``reason`` exactly for ``exception``; the SAS query string
arriving byte for byte, the poll SAS on gets and deletes and the update-only SAS on releases;
percent-encoded pop receipts; reclaims, reports and artifacts only for running runs;
createArtifact bodies against post-artifact-request.json (``object`` refused, as the
coordinator does); artifact uploads (the ``putUrl`` createArtifact answered, a PUT to the
double's own upload route as the coordinator's) unsigned, with the declared Content-Type and
an exact Content-Length, their bytes kept as sent (``uploads``).

What it checks of itself: every answer of a coordinator route, and every error body, against
the coordinator's own JSON Schemas (:mod:`coordinator.api.validation`, through the endpoint
table), so it cannot drift from the real API. A violation is answered as a 500 and fails the
test when the ``double`` fixture ends. Tests name tasks readably (``t1``); the check reads
each such name as the slugid it stands for (:func:`slug_of`). Departures a test asks for are
sent unchecked: its ``faults`` items in a batch answer, and the answers of an older
coordinator (no batch routes, no ``signedReleaseUrl``) are made from checked ones.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import itertools
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape

import mohawk
import pytest
import slugid
from aiohttp import web
from mohawk.util import parse_authorization_header

from coordinator.api.errors import InputValidationError
from coordinator.api.services import ENDPOINTS
from coordinator.api.validation import ResponseSchemaError, validate, validate_response
from devharness.ports import free_port
from devharness.waiting import wait_until
from hawk_signing import Credentials

SAS = "sv=2023-11-03&se=2099-01-01T00%3A00%3A00Z&sp=p&sig=a%2Bb%2Fc%3D"
"""A query string as Azure's SAS looks: percent-encoded, which must survive unchanged."""
RELEASE_SAS = "sv=2023-11-03&se=2099-01-01T00%3A00%3A00Z&sp=u&sig=d%2Be%2Ff%3D"
"""The release URL's SAS: updates only, so gets and deletes must not carry it."""

PRIORITIES = ("highest", "very-high", "high", "medium", "low", "very-low", "lowest")

WORKER = Credentials(client_id="worker-client", access_token="worker-secret")

BATCH_ROUTES = ("claimRuns", "reclaimRuns", "resolveRuns")

API = "/api/queue/v1"

OUTPUTS: Mapping[str, str] = {
    # while the coordinator's endpoint table lacks the artifact routes
    "createArtifact": "post-artifact-response",
    **{e.name: e.output for e in ENDPOINTS if e.output is not None},
}
"""The schema of each coordinator route's answer, by Taskcluster method name."""

PUT_URL_LIFE = timedelta(minutes=45)
"""How long a putUrl works, as the coordinator's (Taskcluster's)."""

REPORTS = {"completed": "reportCompleted", "failed": "reportFailed", "exception": "reportException"}

_BATCH_ITEMS = {"claimRuns": "claims", "reclaimRuns": "reclaims", "resolveRuns": "reports"}

INJECTED = web.RequestKey("injected", set[int])
"""Positions of a batch answer's items that a test's faults made: not checked."""
Departure = Callable[[dict[str, Any]], dict[str, Any]]
DEPARTURE: web.RequestKey[Departure] = web.RequestKey("departure")
"""Changes a checked answer into what an older coordinator answers instead."""

TASK_GROUP = slugid.nice()
"""The taskGroupId of every task of every double."""


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def hint_text(task_id: str, run_id: int) -> str:
    body = json.dumps({"taskId": task_id, "runId": run_id, "hintId": uuid.uuid4().hex})
    return base64.b64encode(body.encode()).decode()


def slug_of(name: str) -> str:
    """The slugid a readable task name stands for (the same for the same name); a slugid
    stands for itself."""
    if _is_slugid(name):
        return name
    digest = uuid.uuid5(uuid.NAMESPACE_URL, f"coordinator-double:{name}")
    return str(slugid.encode(uuid.UUID(bytes=digest.bytes, version=4)))


def _is_slugid(text: str) -> bool:
    try:
        return slugid.encode(slugid.decode(text)) == text and len(text) == 22
    except ValueError:
        return False


@dataclass(kw_only=True)
class Message:
    message_id: str
    text: str
    pop_receipt: str = ""
    dequeue_count: int = 0
    visible_at: float = 0.0


@dataclass(kw_only=True)
class Run:
    state: str = "pending"
    reason: str | None = None
    reason_created: str = "scheduled"
    scheduled: datetime = field(default_factory=lambda: datetime.now(UTC))
    started: datetime | None = None
    resolved: datetime | None = None
    worker_group: str | None = None
    worker_id: str | None = None
    taken_until: datetime | None = None
    credentials: Credentials | None = None
    certificate: dict[str, Any] | None = None
    reclaims: int = 0


@dataclass(frozen=True, kw_only=True)
class Upload:
    """An artifact's bytes as a PUT to its putUrl sent them, and the headers that matter."""

    content: bytes
    content_type: str
    content_encoding: str | None


@dataclass(kw_only=True)
class Task:
    definition: dict[str, Any]
    retries_left: int = 5
    runs: list[Run] = field(default_factory=lambda: [Run()])


class _Refusal(Exception):
    """An error answer of the coordinator: raised by the routes' logic, answered (with its
    ``requestInfo``) by the middleware, or made one run's item of a batch answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class _Dropped(Exception):
    """A fault that drops the connection instead of answering."""


class CoordinatorDouble:
    """In-memory stand-in; see the module docstring. Knobs are plain attributes."""

    def __init__(self) -> None:
        self.root_url = ""
        self.tasks: dict[str, Task] = {}
        self.queues: dict[str, list[Message]] = {priority: [] for priority in PRIORITIES}
        self.credentials: Credentials | None = WORKER
        self.claim_timeout_s = 1200.0
        self.url_life = 1800.0
        self.visibility_timeout: float | None = None
        """Overrides the poll URL's visibilitytimeout, to see kept messages come back."""
        self.release_urls = True
        """False: pollTaskUrls lacks ``signedReleaseUrl``, as an older coordinator."""
        self.release_visibility = 1
        """The visibilitytimeout (seconds) the release URLs carry, as the coordinator's."""
        self.claim_work_wait = 0.2
        self.claim_gate: asyncio.Event | None = None
        """When set, claimTask answers only once the event is."""
        self.get_gate: asyncio.Event | None = None
        """When set, Azure gets answer only once the event is."""
        self.report_gate: asyncio.Event | None = None
        """When set, reports (single or batched) are answered only once the event is."""
        self.keep_full: set[str] = set()
        """Priorities whose queue gets a new task for each run claimed from it: never empty."""
        self._refills = itertools.count()
        self.batch_routes = True
        """False: claimRuns, reclaimRuns and resolveRuns answer 404, as an older coordinator."""
        self.faults: dict[str, list[int]] = {}
        """Route name -> statuses to answer instead, in turn; 0 drops the connection. A batch
        route's run, ``"reclaimRuns:<taskId>/<runId>"``, gets the status as its item's error."""
        self.requests: list[tuple[str, str]] = []
        """(route name, detail) of every request, in order."""
        self.signers: list[tuple[str, str]] = []
        """(route name, Hawk id) of every signed request."""
        self.deleted: list[str] = []
        self.released: list[tuple[str, int]] = []
        """(messageId, visibilitytimeout) of every message released."""
        self.reports: list[tuple[str, int, str, str | None]] = []
        self.artifacts: dict[tuple[str, int, str], dict[str, Any]] = {}
        """The last createArtifact body of each (taskId, runId, name)."""
        self.uploads: dict[tuple[str, int, str], Upload] = {}
        """The last upload of each (taskId, runId, name)."""
        self._put_urls: dict[str, tuple[str, int, str, str]] = {}
        """The signature of each putUrl handed out: what it may upload, and its contentType."""
        self.violations: list[str] = []
        """Answers of the double that broke the coordinator's schemas (see the module docs)."""
        self.served: collections.Counter[str] = collections.Counter()
        """Coordinator requests by the root URL (replica) they arrived at."""
        self._runner: web.AppRunner | None = None
        self._sites: dict[str, web.TCPSite] = {}
        self._dead: set[str] = set()
        self._started = time.monotonic()
        self._receipts = itertools.count(1)
        self.app = web.Application(middlewares=[self._checked])
        routes: list[tuple[str, str, Callable[[web.Request], Awaitable[web.StreamResponse]]]] = [
            ("ping", "GET /ping", self._ping),
            ("pollTaskUrls", "GET /poll-task-url/{p}/{w}", self._poll_task_urls),
            ("claimTask", "POST /task/{task}/runs/{run}/claim", self._claim),
            ("reclaimTask", "POST /task/{task}/runs/{run}/reclaim", self._reclaim),
            *(
                (name, f"POST /task/{{task}}/runs/{{run}}/{kind}", self._report)
                for kind, name in REPORTS.items()
            ),
            ("claimWork", "POST /claim-work/{p}/{w}", self._claim_work),
            ("claimRuns", "POST /claim-runs", self._claim_runs),
            ("reclaimRuns", "POST /reclaim-runs", self._reclaim_runs),
            ("resolveRuns", "POST /resolve-runs", self._resolve_runs),
            (
                "createArtifact",
                "POST /task/{task}/runs/{run}/artifacts/{name:.+}",
                self._create_artifact,
            ),
            (
                "uploadArtifact",
                "PUT /task/{task}/runs/{run}/artifact-upload/{name:.+}",
                self._upload_artifact,
            ),
        ]
        for name, route, handler in routes:
            method, path = route.split(" ")
            self.app.router.add_route(method, API + path, handler, name=name)
        azure = "/azure/devstoreaccount1/{queue}/messages"
        self.app.router.add_get(azure, self._get_messages)
        self.app.router.add_delete(azure + "/{message}", self._delete_message)
        self.app.router.add_put(azure + "/{message}", self._update_message)

    # -- serving, and replicas -----------------------------------------------------------

    async def start(self) -> None:
        """Serve on a free 127.0.0.1 port, ``root_url`` (Azure's routes included)."""
        # auto_decompress off: an upload's bytes are kept as sent, gzip or not.
        self._runner = web.AppRunner(self.app, access_log=None, auto_decompress=False)
        await self._runner.setup()
        self.root_url = await self.add_replica()

    async def add_replica(self) -> str:
        """Serve the same double on one more port, as a replica sharing the store; its root
        URL. (Signed Azure URLs keep pointing at ``root_url``.)"""
        assert self._runner is not None, "start() first"
        port = free_port()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        root_url = f"http://127.0.0.1:{port}"
        self._sites[root_url] = site
        return root_url

    async def kill(self, root_url: str) -> None:
        """The replica at ``root_url`` dies: new connections are refused, requests on open
        ones are dropped unanswered."""
        self._dead.add(root_url)
        await self._sites.pop(root_url).stop()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- test controls ------------------------------------------------------------------

    def add_task(
        self,
        task_id: str,
        *,
        priority: str = "lowest",
        payload: Any = None,
        hint: bool = True,
        retries_left: int = 5,
    ) -> None:
        now = datetime.now(UTC)
        # normalised, every default filled in, as the coordinator's task definitions are
        definition = {
            "provisionerId": "prov",
            "workerType": "wt",
            "taskQueueId": "prov/wt",
            "projectId": "none",
            "schedulerId": "-",
            "taskGroupId": TASK_GROUP,
            "dependencies": [],
            "requires": "all-completed",
            "routes": [],
            "priority": priority,
            "retries": retries_left,
            "created": iso(now),
            "deadline": iso(now + timedelta(days=1)),
            "expires": iso(now + timedelta(days=365)),
            "scopes": [],
            "payload": {} if payload is None else payload,
            "metadata": {
                "name": task_id,
                "description": "a task of the coordinator double",
                "owner": "tests@example.com",
                "source": "https://example.com/tests",
            },
            "tags": {},
            "extra": {},
        }
        self.tasks[task_id] = Task(definition=definition, retries_left=retries_left)
        if hint:
            self.put(priority, hint_text(task_id, 0))

    def put(self, priority: str, text: str, *, dequeue_count: int = 0) -> Message:
        message = Message(message_id=str(uuid.uuid4()), text=text, dequeue_count=dequeue_count)
        self.queues[priority].append(message)
        return message

    def run(self, task_id: str, run_id: int = 0) -> Run:
        return self.tasks[task_id].runs[run_id]

    def routes(self, name: str) -> list[str]:
        """The details of the requests of route ``name``: a run as ``taskId/runId`` (the batch
        routes list theirs, comma-separated), an Azure get as ``queue:count``, a delete or an
        update (``updateMessage``) as the messageId."""
        return [detail for route, detail in self.requests if route == name]

    def gets(self, priority: str) -> int:
        """How many times the worker polled the Azure queue of ``priority``."""
        return sum(detail.startswith(priority + ":") for detail in self.routes("getMessages"))

    def visible(self, priority: str) -> list[Message]:
        """The messages of the queue of ``priority`` that a get would return now."""
        now = time.monotonic()
        return [message for message in self.queues[priority] if message.visible_at <= now]

    # -- checking answers against the coordinator's schemas -------------------------------

    @web.middleware
    async def _checked(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """Answer refusals as the coordinator does, drop connections for faults, and check
        every answer of a coordinator route against its schema (``error`` for refusals)."""
        name = request.match_info.route.name
        if name is None or name not in OUTPUTS:  # Azure's routes, and routes the double lacks
            return await handler(request)
        assert request.transport is not None
        host, port = request.transport.get_extra_info("sockname")[:2]
        root_url = f"http://{host}:{port}"
        if root_url in self._dead:
            request.transport.close()
            return web.Response(status=500)  # never arrives
        self.served[root_url] += 1
        try:
            response = await handler(request)
        except _Refusal as refusal:
            body = {
                "code": refusal.code,
                "message": refusal.message,
                "requestInfo": await self._request_info(request, name),
            }
            return self._answer(request, "error", body, status=refusal.status)
        except _Dropped:
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=500)  # never arrives
        if not isinstance(response, web.Response) or response.status != 200:
            return response  # an older coordinator's missing route (web.HTTPNotFound)
        assert isinstance(response.body, bytes)
        body = json.loads(response.body)
        return self._answer(request, OUTPUTS[name], body, status=200)

    def _answer(
        self, request: web.Request, schema: str, body: dict[str, Any], *, status: int
    ) -> web.Response:
        """``body`` as the answer, once checked against ``schema`` (less the batch items a
        test's faults made, listed in ``request[INJECTED]``), then changed by
        ``request[DEPARTURE]`` (what an older coordinator answers instead); a 500 naming the
        violation instead when it breaks the schema."""
        injected = request.get(INJECTED, set())
        checked = _as_slugids(body)
        items = _BATCH_ITEMS.get(request.match_info.route.name or "")
        if status == 200 and items is not None:
            checked[items] = [i for n, i in enumerate(checked[items]) if n not in injected]
        try:
            validate_response(schema, checked)
        except ResponseSchemaError as error:
            violation = f"{request.method} {request.path} (status {status}): {error}"
            self.violations.append(violation)
            return web.json_response({"code": "DoubleBroken", "message": violation}, status=500)
        departure = request.get(DEPARTURE)
        return web.json_response(body if departure is None else departure(body), status=status)

    async def _request_info(self, request: web.Request, name: str) -> dict[str, Any]:
        text = (await request.read()).decode(errors="replace")
        try:
            payload = json.loads(text) if text else {}
        except ValueError:
            payload = text
        return {
            "method": name,
            "params": dict(request.match_info),
            "payload": payload,
            "time": iso(datetime.now(UTC)),
        }

    # -- Hawk ---------------------------------------------------------------------------

    async def _check_hawk(
        self, request: web.Request, name: str, expected: Credentials | None
    ) -> dict[str, Any]:
        """Verify the signature as the real coordinator would; returns the parsed ext."""
        header = request.headers.get("Authorization")
        if expected is None:
            if header is not None:
                raise _Refusal(401, "AuthenticationFailed", "unexpected Authorization header")
            return {}
        if header is None:
            raise _Refusal(401, "AuthenticationFailed", "missing Authorization header")
        content = await request.read()

        def lookup(client_id: str) -> dict[str, str]:
            if client_id != expected.client_id:
                raise LookupError(f"{client_id} is not {expected.client_id}")
            return {"id": client_id, "key": expected.access_token, "algorithm": "sha256"}

        try:
            mohawk.Receiver(
                lookup,
                header,
                str(request.url),
                request.method,
                content=content.decode(),
                content_type=request.headers.get("Content-Type", ""),
            )
        except Exception as error:
            raise _Refusal(
                401, "AuthenticationFailed", f"{type(error).__name__}: {error}"
            ) from None
        self.signers.append((name, expected.client_id))
        ext_text = parse_authorization_header(header).get("ext", "")
        ext: dict[str, Any] = json.loads(base64.urlsafe_b64decode(ext_text))
        return ext

    # -- coordinator routes ---------------------------------------------------------------

    def _fault(self, name: str) -> None:
        """Raise the next fault a test set for route ``name``, if any."""
        pending = self.faults.get(name)
        if not pending:
            return
        status = pending.pop(0)
        if status == 0:
            raise _Dropped()
        raise _Refusal(status, "Injected", f"injected {status}")

    async def _ping(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(("ping", request.path))
        self._fault("ping")
        return web.json_response({"alive": True, "uptime": time.monotonic() - self._started})

    async def _poll_task_urls(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(("pollTaskUrls", request.path))
        await self._check_hawk(request, "pollTaskUrls", self.credentials)
        self._fault("pollTaskUrls")
        base = f"{self.root_url}/azure/devstoreaccount1"
        queues = []
        for name in self.queues:
            message = f"{base}/{name}/messages/{{{{messageId}}}}?popreceipt={{{{popReceipt}}}}"
            queues.append(
                {
                    "signedPollUrl": f"{base}/{name}/messages?visibilitytimeout=300&{SAS}",
                    "signedDeleteUrl": f"{message}&{SAS}",
                    "signedReleaseUrl": (
                        f"{message}&visibilitytimeout={self.release_visibility}&{RELEASE_SAS}"
                    ),
                }
            )
        expires = datetime.now(UTC) + timedelta(seconds=self.url_life)
        if not self.release_urls:
            request[DEPARTURE] = _without_release_urls
        return web.json_response({"queues": queues, "expires": iso(expires)})

    def _run(self, task_id: str, run_id: int) -> tuple[Task, Run]:
        task = self.tasks.get(task_id)
        if task is None or run_id >= len(task.runs):
            raise _Refusal(404, "ResourceNotFound", f"no run {task_id}/{run_id}")
        return task, task.runs[run_id]

    def _status(self, task_id: str) -> dict[str, Any]:
        """The task's status, as task-status.json has it."""
        task = self.tasks[task_id]
        definition = task.definition
        runs = []
        for run_id, run in enumerate(task.runs):
            entry: dict[str, Any] = {
                "runId": run_id,
                "state": run.state,
                "reasonCreated": run.reason_created,
                "scheduled": iso(run.scheduled),
            }
            if run.state not in ("pending", "running"):
                entry["reasonResolved"] = run.reason or run.state
            if run.worker_group is not None and run.worker_id is not None:
                entry["workerGroup"], entry["workerId"] = run.worker_group, run.worker_id
            for key, moment in (
                ("takenUntil", run.taken_until),
                ("started", run.started),
                ("resolved", run.resolved),
            ):
                if moment is not None:
                    entry[key] = iso(moment)
            runs.append(entry)
        return {
            "taskId": task_id,
            **{
                key: definition[key]
                for key in (
                    "provisionerId",
                    "workerType",
                    "taskQueueId",
                    "schedulerId",
                    "projectId",
                    "taskGroupId",
                    "priority",
                    "deadline",
                    "expires",
                )
            },
            "retriesLeft": task.retries_left,
            "state": task.runs[-1].state,
            "runs": runs,
        }

    def _claim_run(self, task_id: str, run_id: int, body: dict[str, Any]) -> dict[str, Any]:
        task, run = self._run(task_id, run_id)
        holder = (body["workerGroup"], body["workerId"])
        if run.state == "running" and (run.worker_group, run.worker_id) == holder:
            pass
        elif run.state != "pending" or run_id != len(task.runs) - 1:
            raise _Refusal(409, "RequestConflict", f"run {task_id}/{run_id} is {run.state}")
        run.state = "running"
        run.started = run.started or datetime.now(UTC)
        run.worker_group, run.worker_id = holder
        self._issue(task_id, run_id, run)
        priority = task.definition["priority"]
        if priority in self.keep_full:
            self.add_task(f"refill-{priority}-{next(self._refills)}", priority=priority)
        assert run.taken_until is not None
        return {
            "status": self._status(task_id),
            "runId": run_id,
            "workerGroup": run.worker_group,
            "workerId": run.worker_id,
            "takenUntil": iso(run.taken_until),
            "task": task.definition,
            "credentials": self._credentials_json(run),
        }

    def _issue(self, task_id: str, run_id: int, run: Run) -> None:
        """A new takenUntil and new temporary credentials, as claim and reclaim give."""
        run.taken_until = datetime.now(UTC) + timedelta(seconds=self.claim_timeout_s)
        run.certificate = {
            "version": 1,
            "scopes": [f"queue:reclaim-task:{task_id}/{run_id}"],
            "start": int(time.time() * 1000),
            "expiry": int(run.taken_until.timestamp() * 1000),
            "seed": secrets.token_urlsafe(32),
            "signature": base64.b64encode(secrets.token_bytes(32)).decode(),
            "issuer": WORKER.client_id,
        }
        run.credentials = Credentials(
            client_id=f"task-client/{task_id}/{run_id}/{run.reclaims}",
            access_token=secrets.token_urlsafe(32),
            certificate=json.dumps(run.certificate),
        )

    @staticmethod
    def _credentials_json(run: Run) -> dict[str, str]:
        assert run.credentials is not None and run.credentials.certificate is not None
        return {
            "clientId": run.credentials.client_id,
            "accessToken": run.credentials.access_token,
            "certificate": run.credentials.certificate,
        }

    async def _claim(self, request: web.Request) -> web.StreamResponse:
        task_id, run_id = request.match_info["task"], int(request.match_info["run"])
        self.requests.append(("claimTask", f"{task_id}/{run_id}"))
        await self._check_hawk(request, "claimTask", self.credentials)
        if self.claim_gate is not None:
            await self.claim_gate.wait()
        self._fault("claimTask")
        return web.json_response(self._claim_run(task_id, run_id, await request.json()))

    async def _check_run_hawk(self, request: web.Request, name: str) -> None:
        _, run = self._run(request.match_info["task"], int(request.match_info["run"]))
        ext = await self._check_hawk(request, name, run.credentials)
        if ext.get("certificate") != run.certificate:
            raise _Refusal(401, "AuthenticationFailed", f"ext lacks the certificate: {ext}")

    def _reclaim_run(self, task_id: str, run_id: int) -> dict[str, Any]:
        _, run = self._run(task_id, run_id)
        if run.state != "running" or run.taken_until is None:
            raise _Refusal(409, "RequestConflict", f"run is {run.state}")
        if run.taken_until < datetime.now(UTC):
            run.state, run.reason = "exception", "claim-expired"
            run.resolved = datetime.now(UTC)
            raise _Refusal(409, "RequestConflict", "claim expired")
        run.reclaims += 1
        self._issue(task_id, run_id, run)
        assert run.worker_group is not None and run.worker_id is not None
        return {
            "status": self._status(task_id),
            "runId": run_id,
            "workerGroup": run.worker_group,
            "workerId": run.worker_id,
            "takenUntil": iso(run.taken_until),
            "credentials": self._credentials_json(run),
        }

    def _report_run(
        self, task_id: str, run_id: int, kind: str, reason: str | None
    ) -> dict[str, Any]:
        _, run = self._run(task_id, run_id)
        if run.state != "running":
            raise _Refusal(409, "RequestConflict", f"run is {run.state}")
        run.state, run.reason = kind, reason
        run.resolved = datetime.now(UTC)
        self.reports.append((task_id, run_id, kind, reason))
        return {"status": self._status(task_id)}

    async def _reclaim(self, request: web.Request) -> web.StreamResponse:
        task_id, run_id = request.match_info["task"], int(request.match_info["run"])
        self.requests.append(("reclaimTask", f"{task_id}/{run_id}"))
        await self._check_run_hawk(request, "reclaimTask")
        self._fault("reclaimTask")
        return web.json_response(self._reclaim_run(task_id, run_id))

    async def _report(self, request: web.Request) -> web.StreamResponse:
        task_id, run_id = request.match_info["task"], int(request.match_info["run"])
        kind = request.path.rsplit("/", 1)[1]
        self.requests.append((kind, f"{task_id}/{run_id}"))
        await self._check_run_hawk(request, kind)
        self._fault(kind)
        reason = (await request.json())["reason"] if kind == "exception" else None
        if self.report_gate is not None:
            await self.report_gate.wait()
        return web.json_response(self._report_run(task_id, run_id, kind, reason))

    # -- artifacts ------------------------------------------------------------------------

    async def _create_artifact(self, request: web.Request) -> web.StreamResponse:
        task_id, run_id = request.match_info["task"], int(request.match_info["run"])
        name = request.match_info["name"]
        self.requests.append(("createArtifact", f"{task_id}/{run_id}/{name}"))
        await self._check_run_hawk(request, "createArtifact")
        self._fault("createArtifact")
        body = await request.json()
        try:
            validate("post-artifact-request", body)
        except InputValidationError as error:
            raise _Refusal(400, "InputValidationError", str(error)) from None
        storage_type = body["storageType"]
        if storage_type == "object":
            raise _Refusal(400, "InputError", "storageType object is not supported here: use s3")
        _, run = self._run(task_id, run_id)
        if run.state != "running":
            raise _Refusal(409, "RequestConflict", f"run {task_id}/{run_id} is {run.state}")
        self.artifacts[(task_id, run_id, name)] = body
        if storage_type != "s3":
            return web.json_response({"storageType": storage_type})
        signature = secrets.token_hex(16)
        self._put_urls[signature] = (task_id, run_id, name, body["contentType"])
        path = f"{API}/task/{task_id}/runs/{run_id}/artifact-upload/{quote(name, safe='')}"
        return web.json_response(
            {
                "storageType": "s3",
                "putUrl": f"{self.root_url}{path}?sig={signature}",
                "expires": iso(datetime.now(UTC) + PUT_URL_LIFE),
                "contentType": body["contentType"],
            }
        )

    async def _upload_artifact(self, request: web.Request) -> web.StreamResponse:
        """The coordinator's upload route as the double has it: the putUrl's signature names
        what it may upload; JSON errors as the coordinator's."""
        key = (
            request.match_info["task"],
            int(request.match_info["run"]),
            request.match_info["name"],
        )
        self.requests.append(("uploadArtifact", "{}/{}/{}".format(*key)))
        pending = self.faults.get("uploadArtifact")
        if pending:
            status = pending.pop(0)
            if status == 0:
                assert request.transport is not None
                request.transport.close()
                return web.Response(status=500)  # never arrives
            return _json_error(status, "Injected", f"injected {status}")
        signed = self._put_urls.get(request.query.get("sig", ""))
        if signed is None or signed[:3] != key:
            return _json_error(403, "AuthenticationFailed", "not a putUrl of this artifact")
        content_type = signed[3]
        if "Authorization" in request.headers:
            return _json_error(400, "InputError", "an upload carries no Authorization header")
        if request.headers.get("Content-Type") != content_type:
            sent = request.headers.get("Content-Type")
            return _json_error(400, "InputError", f"Content-Type {sent!r} is not {content_type!r}")
        if request.content_length is None:
            return _json_error(411, "LengthRequired", "an upload needs a Content-Length")
        # read as a stream: request.read() would refuse more than client_max_size (1 MiB)
        content = b"".join([chunk async for chunk in request.content.iter_chunked(2**16)])
        if len(content) != request.content_length:
            return _json_error(400, "InputError", "the body is not Content-Length long")
        self.uploads[key] = Upload(
            content=content,
            content_type=content_type,
            content_encoding=request.headers.get("Content-Encoding"),
        )
        return web.json_response({})

    # -- batch routes ---------------------------------------------------------------------

    async def _batch(
        self, request: web.Request, name: str, key: str
    ) -> tuple[dict[str, Any], list[tuple[str, int]]]:
        """The body and runs of a batch request, checked as the coordinator would; raises the
        answer for the whole request instead (404 while the double has no batch routes)."""
        body = await request.json()
        items = body[key]
        runs = [(item["taskId"], item["runId"]) for item in items]
        self.requests.append((name, ",".join(f"{task_id}/{run_id}" for task_id, run_id in runs)))
        if not self.batch_routes:
            raise web.HTTPNotFound()
        await self._check_hawk(request, name, self.credentials)
        if not 1 <= len(runs) <= 32 or len(set(runs)) != len(runs):
            raise _Refusal(400, "InputValidationError", f"{key}: 1 to 32 distinct runs, not {runs}")
        return body, runs

    def _items(
        self,
        request: web.Request,
        name: str,
        runs: list[tuple[str, int]],
        answer: Callable[[str, int, int], dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """Each run's item of a batch answer: ``answer(taskId, runId, position)``, or the error
        it or a test's fault gives; the positions of the faults go to ``request[INJECTED]``,
        which the schema check leaves out."""
        items = []
        injected: set[int] = set()
        for position, (task_id, run_id) in enumerate(runs):
            pending = self.faults.get(f"{name}:{task_id}/{run_id}")
            try:
                if pending:
                    status = pending.pop(0)
                    injected.add(position)
                    raise _Refusal(status, "Injected", f"injected {status}")
                items.append(answer(task_id, run_id, position))
            except _Refusal as refusal:
                error = {"status": refusal.status, "code": refusal.code, "message": refusal.message}
                items.append({"taskId": task_id, "runId": run_id, "error": error})
        request[INJECTED] = injected
        return items

    async def _claim_runs(self, request: web.Request) -> web.StreamResponse:
        body, runs = await self._batch(request, "claimRuns", "runs")
        if self.claim_gate is not None:
            await self.claim_gate.wait()
        self._fault("claimRuns")
        claims = self._items(
            request, "claimRuns", runs, lambda t, r, _: self._claim_run(t, r, body)
        )
        return web.json_response({"claims": claims})

    async def _reclaim_runs(self, request: web.Request) -> web.StreamResponse:
        _, runs = await self._batch(request, "reclaimRuns", "runs")
        self._fault("reclaimRuns")
        reclaims = self._items(
            request, "reclaimRuns", runs, lambda t, r, _: self._reclaim_run(t, r)
        )
        return web.json_response({"reclaims": reclaims})

    async def _resolve_runs(self, request: web.Request) -> web.StreamResponse:
        body, runs = await self._batch(request, "resolveRuns", "reports")
        items = body["reports"]
        for item in items:
            kind = item["resolution"]
            if kind not in ("completed", "failed", "exception") or (
                (kind == "exception") != ("reason" in item)
            ):
                raise _Refusal(400, "InputValidationError", f"not a report: {item}")
        self._fault("resolveRuns")
        if self.report_gate is not None:
            await self.report_gate.wait()

        def resolve(task_id: str, run_id: int, position: int) -> dict[str, Any]:
            item = items[position]
            status = self._report_run(task_id, run_id, item["resolution"], item.get("reason"))
            return {"taskId": task_id, "runId": run_id, **status}

        return web.json_response({"reports": self._items(request, "resolveRuns", runs, resolve)})

    async def _claim_work(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(("claimWork", str(body["tasks"])))
        await self._check_hawk(request, "claimWork", self.credentials)
        self._fault("claimWork")
        give_up = time.monotonic() + self.claim_work_wait
        while True:
            pending = [
                (task_id, len(task.runs) - 1)
                for priority in PRIORITIES
                for task_id, task in self.tasks.items()
                if task.definition["priority"] == priority and task.runs[-1].state == "pending"
            ]
            if pending or time.monotonic() > give_up:
                break
            if request.transport is None or request.transport.is_closing():
                # Like the real coordinator: claim nothing for a client that hung up.
                self.requests.append(("claimWorkHungUp", str(body["tasks"])))
                return web.json_response({"tasks": []})
            await asyncio.sleep(0.02)
        claims = [self._claim_run(t, r, body) for t, r in pending[: body["tasks"]]]
        return web.json_response({"tasks": claims})

    # -- Azure routes ---------------------------------------------------------------------

    def _azure_fault(self, name: str, request: web.Request) -> web.Response | None:
        pending = self.faults.get(name)
        if not pending:
            return None
        status = pending.pop(0)
        if status == 0:
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=500)
        return web.Response(
            status=status,
            text=_azure_error("Injected", f"injected {status}"),
            content_type="application/xml",
        )

    @staticmethod
    def _check_sas(request: web.Request, sas: str) -> None:
        # raw_path: query_string would show the query already percent-decoded.
        query = request.raw_path.partition("?")[2]
        if not query.endswith(sas) and sas + "&" not in query:
            raise web.HTTPForbidden(text=_azure_error("AuthenticationFailed", "SAS mangled"))

    async def _get_messages(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["queue"]
        count = int(request.query["numofmessages"])
        self.requests.append(("getMessages", f"{name}:{count}"))
        self._check_sas(request, SAS)
        if fault := self._azure_fault("getMessages", request):
            return fault
        if self.get_gate is not None:
            await self.get_gate.wait()
        now = time.monotonic()
        timeout = self.visibility_timeout
        if timeout is None:
            timeout = float(request.query["visibilitytimeout"])
        taken = self.visible(name)[:count]
        parts = []
        for message in taken:
            message.visible_at = now + timeout
            message.dequeue_count += 1
            message.pop_receipt = self._pop_receipt()
            parts.append(
                "<QueueMessage>"
                f"<MessageId>{message.message_id}</MessageId>"
                "<InsertionTime>Sun, 22 Nov 2026 05:00:00 GMT</InsertionTime>"
                "<ExpirationTime>Sun, 29 Nov 2026 05:00:00 GMT</ExpirationTime>"
                f"<PopReceipt>{escape(message.pop_receipt)}</PopReceipt>"
                "<TimeNextVisible>Sun, 22 Nov 2026 05:05:00 GMT</TimeNextVisible>"
                f"<DequeueCount>{message.dequeue_count}</DequeueCount>"
                f"<MessageText>{escape(message.text)}</MessageText>"
                "</QueueMessage>"
            )
        xml = (
            '<?xml version="1.0" encoding="utf-8"?><QueueMessagesList>'
            + "".join(parts)
            + "</QueueMessagesList>"
        )
        return web.Response(text=xml, content_type="application/xml")

    def _pop_receipt(self) -> str:
        # Real pop receipts are base64: '+', '/' and '=' must be percent-encoded.
        return f"AgAAAA+/{next(self._receipts)}=="

    def _received(self, request: web.Request) -> Message | None:
        """The message the request names, if its pop receipt is the current one."""
        name, message_id = request.match_info["queue"], request.match_info["message"]
        receipt = request.query.get("popreceipt", "")
        for message in self.queues[name]:
            if message.message_id == message_id and message.pop_receipt == receipt:
                return message
        return None

    async def _delete_message(self, request: web.Request) -> web.StreamResponse:
        message_id = request.match_info["message"]
        self.requests.append(("deleteMessage", message_id))
        self._check_sas(request, SAS)
        if fault := self._azure_fault("deleteMessage", request):
            return fault
        message = self._received(request)
        if message is None:
            return _message_not_found(request)
        self.queues[request.match_info["queue"]].remove(message)
        self.deleted.append(message_id)
        return web.Response(status=204)

    async def _update_message(self, request: web.Request) -> web.StreamResponse:
        """Update Message without a body: only the visibility timeout changes (a release)."""
        message_id = request.match_info["message"]
        self.requests.append(("updateMessage", message_id))
        self._check_sas(request, RELEASE_SAS)
        if fault := self._azure_fault("updateMessage", request):
            return fault
        if await request.read():
            raise web.HTTPBadRequest(text=_azure_error("InvalidInput", "releases have no body"))
        visibility = int(request.query["visibilitytimeout"])
        message = self._received(request)
        if message is None:
            return _message_not_found(request)
        message.visible_at = time.monotonic() + visibility
        message.pop_receipt = self._pop_receipt()
        self.released.append((message_id, visibility))
        return web.Response(status=204, headers={"x-ms-popreceipt": message.pop_receipt})


def _as_slugids(value: Any) -> Any:
    """``value`` with each ``taskId`` that is a readable name replaced by :func:`slug_of` it."""
    if isinstance(value, list):
        return [_as_slugids(item) for item in value]
    if not isinstance(value, dict):
        return value
    return {
        key: slug_of(item) if key == "taskId" and isinstance(item, str) else _as_slugids(item)
        for key, item in value.items()
    }


def _without_release_urls(body: dict[str, Any]) -> dict[str, Any]:
    """A pollTaskUrls answer as a coordinator before ``signedReleaseUrl`` gave it."""
    queues = [
        {key: url for key, url in queue.items() if key != "signedReleaseUrl"}
        for queue in body["queues"]
    ]
    return {**body, "queues": queues}


def _json_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"code": code, "message": message}, status=status)


def _message_not_found(request: web.Request) -> web.Response:
    message_id = request.match_info["message"]
    receipt = request.query.get("popreceipt", "")
    return web.Response(
        status=404,
        text=_azure_error("MessageNotFound", f"no message {message_id} with {receipt!r}"),
        content_type="application/xml",
    )


def _azure_error(code: str, message: str) -> str:
    return (
        f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code>'
        f"<Message>{escape(message)}\nRequestId:0\nTime:now</Message></Error>"
    )


@pytest.fixture(name="double")
async def double_fixture() -> AsyncIterator[CoordinatorDouble]:
    """``double``: a :class:`CoordinatorDouble` serving on a free 127.0.0.1 port; the test
    fails at its end if the double answered anything its schemas forbid.

    Test modules import ``double_fixture`` to get the ``double`` fixture.
    """
    coordinator = CoordinatorDouble()
    await coordinator.start()
    yield coordinator
    await coordinator.close()
    if coordinator.violations:
        raise ResponseSchemaError(
            "the coordinator double broke the API's schemas:\n" + "\n".join(coordinator.violations)
        )


async def eventually(
    predicate: Callable[[], bool], *, within: float = 10.0, what: str = "condition"
) -> None:
    """:func:`~devharness.waiting.wait_until` for the double's state, checked every 10 ms."""
    await wait_until(predicate, within=within, what=what, interval=0.01)
