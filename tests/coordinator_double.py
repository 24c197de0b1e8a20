"""Test double of the coordinator's worker-facing routes and of Azure's queue REST API.

Not a test module: the worker SDK's tests import it. It exists because it can do what the
real coordinator and Azurite cannot be made to do on cue: answer 503 to a poll or a report,
refuse one run of a batch, drop a connection, keep a message's DequeueCount high, refuse a
delete, hand out URLs that expire in seconds, lack the batch routes as an older coordinator
does (``batch_routes = False``), and count every request. Behaviour the real system produces
on demand (priority order, outcomes, claimWork, reclaims, a canceled task, shutdown) is tested
against it in tests/integration/test_sdk_real.py.

What it checks of the worker, strictly: Hawk signatures (the worker's credentials for
pollTaskUrls, claims and the batch routes, the run's latest temporary credentials,
certificate in ``ext``, for single reclaims and reports); batches of 1 to 32 distinct runs,
with a report's ``reason`` exactly for ``exception``; the SAS query string arriving byte for
byte; percent-encoded pop receipts; reclaims and reports only for running runs.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import itertools
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from xml.sax.saxutils import escape

import mohawk
import pytest
from aiohttp import web
from mohawk.util import parse_authorization_header

from devharness.waiting import wait_until
from hawk_signing import Credentials

SAS = "sv=2023-11-03&se=2099-01-01T00%3A00%3A00Z&sp=p&sig=a%2Bb%2Fc%3D"
"""A query string as Azure's SAS looks: percent-encoded, which must survive unchanged."""

PRIORITIES = ("highest", "very-high", "high", "medium", "low", "very-low", "lowest")

WORKER = Credentials(client_id="worker-client", access_token="worker-secret")

BATCH_ROUTES = ("claimRuns", "reclaimRuns", "resolveRuns")


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def hint_text(task_id: str, run_id: int) -> str:
    body = json.dumps({"taskId": task_id, "runId": run_id, "hintId": uuid.uuid4().hex})
    return base64.b64encode(body.encode()).decode()


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
    worker_group: str | None = None
    worker_id: str | None = None
    taken_until: datetime | None = None
    credentials: Credentials | None = None
    certificate: dict[str, Any] | None = None
    reclaims: int = 0


@dataclass(kw_only=True)
class Task:
    definition: dict[str, Any]
    retries_left: int = 5
    runs: list[Run] = field(default_factory=lambda: [Run()])


class CoordinatorDouble:
    """In-memory stand-in; see the module docstring. Knobs are plain attributes."""

    def __init__(self) -> None:
        self.root_url = ""
        self.tasks: dict[str, Task] = {}
        self.queues: dict[str, list[Message]] = {priority: [] for priority in PRIORITIES}
        self.credentials: Credentials | None = WORKER
        self.claim_timeout = 1200.0
        self.url_life = 1800.0
        self.visibility_timeout: float | None = None
        """Overrides the poll URL's visibilitytimeout, to see kept messages come back."""
        self.claim_work_wait = 0.2
        self.claim_gate: asyncio.Event | None = None
        """When set, claimTask answers only once the event is."""
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
        self.reports: list[tuple[str, int, str, str | None]] = []
        self._receipts = itertools.count(1)
        self.app = web.Application()
        api = "/api/queue/v1"
        self.app.router.add_get(api + "/poll-task-url/{p}/{w}", self._poll_task_urls)
        self.app.router.add_post(api + "/task/{task}/runs/{run}/claim", self._claim)
        self.app.router.add_post(api + "/task/{task}/runs/{run}/reclaim", self._reclaim)
        self.app.router.add_post(api + "/task/{task}/runs/{run}/{report}", self._report)
        self.app.router.add_post(api + "/claim-work/{p}/{w}", self._claim_work)
        self.app.router.add_post(api + "/claim-runs", self._claim_runs)
        self.app.router.add_post(api + "/reclaim-runs", self._reclaim_runs)
        self.app.router.add_post(api + "/resolve-runs", self._resolve_runs)
        self.app.router.add_get("/azure/devstoreaccount1/{queue}/messages", self._get_messages)
        self.app.router.add_delete(
            "/azure/devstoreaccount1/{queue}/messages/{message}", self._delete_message
        )

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
        definition = {
            "provisionerId": "prov",
            "workerType": "wt",
            "priority": priority,
            "payload": {} if payload is None else payload,
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
        routes list theirs, comma-separated), an Azure get as ``queue:count``."""
        return [detail for route, detail in self.requests if route == name]

    def gets(self, priority: str) -> int:
        """How many times the worker polled the Azure queue of ``priority``."""
        return sum(detail.startswith(priority + ":") for detail in self.routes("getMessages"))

    # -- Hawk ---------------------------------------------------------------------------

    async def _check_hawk(
        self, request: web.Request, name: str, expected: Credentials | None
    ) -> dict[str, Any]:
        """Verify the signature as the real coordinator would; returns the parsed ext."""
        header = request.headers.get("Authorization")
        if expected is None:
            if header is not None:
                raise _error(401, "AuthenticationFailed", "unexpected Authorization header")
            return {}
        if header is None:
            raise _error(401, "AuthenticationFailed", "missing Authorization header")
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
            raise _error(401, "AuthenticationFailed", f"{type(error).__name__}: {error}") from None
        self.signers.append((name, expected.client_id))
        ext_text = parse_authorization_header(header).get("ext", "")
        ext: dict[str, Any] = json.loads(base64.urlsafe_b64decode(ext_text))
        return ext

    # -- coordinator routes ---------------------------------------------------------------

    def _fault(self, name: str, request: web.Request) -> web.Response | None:
        pending = self.faults.get(name)
        if not pending:
            return None
        status = pending.pop(0)
        if status == 0:
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=500)
        return web.json_response(
            {"code": "Injected", "message": f"injected {status}"}, status=status
        )

    async def _poll_task_urls(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(("pollTaskUrls", request.path))
        await self._check_hawk(request, "pollTaskUrls", self.credentials)
        if fault := self._fault("pollTaskUrls", request):
            return fault
        base = f"{self.root_url}/azure/devstoreaccount1"
        queues = [
            {
                "signedPollUrl": f"{base}/{name}/messages?visibilitytimeout=300&{SAS}",
                "signedDeleteUrl": f"{base}/{name}/messages/{{{{messageId}}}}"
                f"?popreceipt={{{{popReceipt}}}}&{SAS}",
            }
            for name in self.queues
        ]
        expires = datetime.now(UTC) + timedelta(seconds=self.url_life)
        return web.json_response({"queues": queues, "expires": iso(expires)})

    def _run(self, task_id: str, run_id: int) -> tuple[Task, Run]:
        task = self.tasks.get(task_id)
        if task is None or run_id >= len(task.runs):
            raise _error(404, "ResourceNotFound", f"no run {task_id}/{run_id}")
        return task, task.runs[run_id]

    def _claim_run(self, task_id: str, run_id: int, body: dict[str, Any]) -> dict[str, Any]:
        task, run = self._run(task_id, run_id)
        holder = (body["workerGroup"], body["workerId"])
        if run.state == "running" and (run.worker_group, run.worker_id) == holder:
            pass
        elif run.state != "pending" or run_id != len(task.runs) - 1:
            raise _error(409, "RequestConflict", f"run {task_id}/{run_id} is {run.state}")
        run.state = "running"
        run.worker_group, run.worker_id = holder
        self._issue(task_id, run_id, run)
        priority = task.definition["priority"]
        if priority in self.keep_full:
            self.add_task(f"refill-{priority}-{next(self._refills)}", priority=priority)
        return {
            "status": {"taskId": task_id, "retriesLeft": task.retries_left},
            "runId": run_id,
            "workerGroup": run.worker_group,
            "workerId": run.worker_id,
            "takenUntil": iso(run.taken_until) if run.taken_until else None,
            "task": task.definition,
            "credentials": self._credentials_json(run),
        }

    def _issue(self, task_id: str, run_id: int, run: Run) -> None:
        """A new takenUntil and new temporary credentials, as claim and reclaim give."""
        run.taken_until = datetime.now(UTC) + timedelta(seconds=self.claim_timeout)
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
        if fault := self._fault("claimTask", request):
            return fault
        return web.json_response(self._claim_run(task_id, run_id, await request.json()))

    async def _check_run_hawk(self, request: web.Request, name: str) -> None:
        _, run = self._run(request.match_info["task"], int(request.match_info["run"]))
        ext = await self._check_hawk(request, name, run.credentials)
        if ext.get("certificate") != run.certificate:
            raise _error(401, "AuthenticationFailed", f"ext lacks the certificate: {ext}")

    def _reclaim_run(self, task_id: str, run_id: int) -> dict[str, Any]:
        _, run = self._run(task_id, run_id)
        if run.state != "running" or run.taken_until is None:
            raise _error(409, "RequestConflict", f"run is {run.state}")
        if run.taken_until < datetime.now(UTC):
            run.state, run.reason = "exception", "claim-expired"
            raise _error(409, "RequestConflict", "claim expired")
        run.reclaims += 1
        self._issue(task_id, run_id, run)
        return {
            "status": {"taskId": task_id},
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
            raise _error(409, "RequestConflict", f"run is {run.state}")
        run.state, run.reason = kind, reason
        self.reports.append((task_id, run_id, kind, reason))
        return {"status": {"taskId": task_id}}

    async def _reclaim(self, request: web.Request) -> web.StreamResponse:
        task_id, run_id = request.match_info["task"], int(request.match_info["run"])
        self.requests.append(("reclaimTask", f"{task_id}/{run_id}"))
        await self._check_run_hawk(request, "reclaimTask")
        if fault := self._fault("reclaimTask", request):
            return fault
        return web.json_response(self._reclaim_run(task_id, run_id))

    async def _report(self, request: web.Request) -> web.StreamResponse:
        task_id, run_id = request.match_info["task"], int(request.match_info["run"])
        kind = request.match_info["report"]
        self.requests.append((kind, f"{task_id}/{run_id}"))
        await self._check_run_hawk(request, kind)
        if fault := self._fault(kind, request):
            return fault
        reason = (await request.json())["reason"] if kind == "exception" else None
        if self.report_gate is not None:
            await self.report_gate.wait()
        return web.json_response(self._report_run(task_id, run_id, kind, reason))

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
            raise _error(400, "InputValidationError", f"{key}: 1 to 32 distinct runs, not {runs}")
        return body, runs

    def _item(
        self, name: str, task_id: str, run_id: int, answer: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """One run's item of a batch answer: ``answer()``, or the error it or a fault gives."""
        pending = self.faults.get(f"{name}:{task_id}/{run_id}")
        try:
            if pending:
                status = pending.pop(0)
                raise _error(status, "Injected", f"injected {status}")
            return answer()
        except web.HTTPException as error:
            body = json.loads(error.text or "{}")
            return {
                "taskId": task_id,
                "runId": run_id,
                "error": {"status": error.status, "code": body["code"], "message": body["message"]},
            }

    async def _claim_runs(self, request: web.Request) -> web.StreamResponse:
        body, runs = await self._batch(request, "claimRuns", "runs")
        if self.claim_gate is not None:
            await self.claim_gate.wait()
        if fault := self._fault("claimRuns", request):
            return fault
        claims = [
            self._item("claimRuns", t, r, functools.partial(self._claim_run, t, r, body))
            for t, r in runs
        ]
        return web.json_response({"claims": claims})

    async def _reclaim_runs(self, request: web.Request) -> web.StreamResponse:
        _, runs = await self._batch(request, "reclaimRuns", "runs")
        if fault := self._fault("reclaimRuns", request):
            return fault
        reclaims = [
            self._item("reclaimRuns", t, r, functools.partial(self._reclaim_run, t, r))
            for t, r in runs
        ]
        return web.json_response({"reclaims": reclaims})

    async def _resolve_runs(self, request: web.Request) -> web.StreamResponse:
        body, runs = await self._batch(request, "resolveRuns", "reports")
        items = body["reports"]
        for item in items:
            kind = item["resolution"]
            if kind not in ("completed", "failed", "exception") or (
                (kind == "exception") != ("reason" in item)
            ):
                raise _error(400, "InputValidationError", f"not a report: {item}")
        if fault := self._fault("resolveRuns", request):
            return fault
        if self.report_gate is not None:
            await self.report_gate.wait()

        def resolve(task_id: str, run_id: int, item: dict[str, Any]) -> dict[str, Any]:
            status = self._report_run(task_id, run_id, item["resolution"], item.get("reason"))
            return {"taskId": task_id, "runId": run_id, **status}

        results = [
            self._item("resolveRuns", t, r, functools.partial(resolve, t, r, item))
            for (t, r), item in zip(runs, items, strict=True)
        ]
        return web.json_response({"reports": results})

    async def _claim_work(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(("claimWork", str(body["tasks"])))
        await self._check_hawk(request, "claimWork", self.credentials)
        if fault := self._fault("claimWork", request):
            return fault
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

    def _check_sas(self, request: web.Request) -> None:
        # raw_path: query_string would show the query already percent-decoded.
        query = request.raw_path.partition("?")[2]
        if not query.endswith(SAS) and SAS + "&" not in query:
            raise web.HTTPForbidden(text=_azure_error("AuthenticationFailed", "SAS mangled"))

    async def _get_messages(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["queue"]
        count = int(request.query["numofmessages"])
        self.requests.append(("getMessages", f"{name}:{count}"))
        self._check_sas(request)
        if fault := self._fault("getMessages", request):
            return fault
        now = time.monotonic()
        timeout = self.visibility_timeout
        if timeout is None:
            timeout = float(request.query["visibilitytimeout"])
        taken = [m for m in self.queues[name] if m.visible_at <= now][:count]
        parts = []
        for message in taken:
            message.visible_at = now + timeout
            message.dequeue_count += 1
            # Real pop receipts are base64: '+', '/' and '=' must be percent-encoded.
            message.pop_receipt = f"AgAAAA+/{next(self._receipts)}=="
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

    async def _delete_message(self, request: web.Request) -> web.StreamResponse:
        name, message_id = request.match_info["queue"], request.match_info["message"]
        receipt = request.query.get("popreceipt", "")
        self.requests.append(("deleteMessage", message_id))
        self._check_sas(request)
        if fault := self._fault("deleteMessage", request):
            return fault
        for message in self.queues[name]:
            if message.message_id == message_id and message.pop_receipt == receipt:
                self.queues[name].remove(message)
                self.deleted.append(message_id)
                return web.Response(status=204)
        return web.Response(
            status=404,
            text=_azure_error("MessageNotFound", f"no message {message_id} with {receipt!r}"),
            content_type="application/xml",
        )


_ERRORS: dict[int, type[web.HTTPException]] = {
    400: web.HTTPBadRequest,
    401: web.HTTPUnauthorized,
    403: web.HTTPForbidden,
    404: web.HTTPNotFound,
    409: web.HTTPConflict,
    410: web.HTTPGone,
    422: web.HTTPUnprocessableEntity,
}


def _error(status: int, code: str, message: str) -> web.HTTPException:
    """A Taskcluster-shaped error answer."""
    body = json.dumps({"code": code, "message": message, "requestInfo": {}})
    return _ERRORS[status](text=body, content_type="application/json")


def _azure_error(code: str, message: str) -> str:
    return (
        f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code>'
        f"<Message>{escape(message)}\nRequestId:0\nTime:now</Message></Error>"
    )


@pytest.fixture(name="double")
async def double_fixture() -> AsyncIterator[CoordinatorDouble]:
    """``double``: a :class:`CoordinatorDouble` serving on a free 127.0.0.1 port.

    Test modules import ``double_fixture`` to get the ``double`` fixture.
    """
    coordinator = CoordinatorDouble()
    runner = web.AppRunner(coordinator.app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    coordinator.root_url = f"http://{host}:{port}"
    yield coordinator
    await runner.cleanup()


async def eventually(
    predicate: Callable[[], bool], *, within: float = 10.0, what: str = "condition"
) -> None:
    """:func:`~devharness.waiting.wait_until` for the double's state, checked every 10 ms."""
    await wait_until(predicate, within=within, what=what, interval=0.01)
