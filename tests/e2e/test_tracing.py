"""Tracing end to end (docs/operations.md#tracing): an OTLP/HTTP receiver in the test, a real
coordinator process and a real ``queue-worker --app`` process exporting to it, and this test's
own app dispatching a function task. The spans dispatch, createTask, claim, handler and the
reports share one trace, each under the one before. With ``OTEL_EXPORTER_OTLP_ENDPOINT``
unset, neither process imports anything of OpenTelemetry, however much work it does."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import slugid
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from coordinator.service.clients_file import ensure_root_client
from devharness.ports import free_port
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.e2e import function_app
from tests.fixtures.workers import E2E, MakeE2E
from worker_sdk import App, tracing
from worker_sdk.calls import encode_call

APP = "tests.e2e.function_app:app"


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1: every span exported to it, decoded."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.url = ""

    async def export(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest.FromString(body)
        for resource_spans in message.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}[
                "service.name"
            ]
            for scope in resource_spans.scope_spans:
                self.spans.extend(
                    ReceivedSpan(
                        service=service,
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        attributes={
                            a.key: getattr(a.value, a.value.WhichOneof("value"))
                            for a in span.attributes
                        },
                    )
                    for span in scope.spans
                )
        # an empty ExportTraceServiceResponse: every span accepted
        return web.Response(body=b"", content_type="application/x-protobuf")

    def named(self, name: str, task_id: str) -> ReceivedSpan:
        """The one span ``name`` of task ``task_id``."""
        found = [s for s in self.spans if s.name == name and s.attributes.get("taskId") == task_id]
        assert len(found) == 1, (name, self.spans)
        return found[0]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    received = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", received.export)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    received.url = f"http://127.0.0.1:{port}"
    yield received
    await runner.cleanup()


@pytest.fixture
async def exporting(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """Every process started from here on (and this one's SDK, whose tracer is opened anew:
    it is opened once a process) exports to the receiver, batches every 100 ms."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    tracing.tracer.cache_clear()
    yield
    tracer = tracing.tracer()
    assert tracer is not None
    # in a thread: its last export is answered by the receiver, on this loop
    await asyncio.to_thread(tracer.shutdown)
    tracing.tracer.cache_clear()


async def _served(
    e2e: MakeE2E, *, claim_work: bool, flags: tuple[str, ...] = ()
) -> tuple[E2E, App]:
    s = await e2e(claim_work=claim_work)
    task_queue = f"{s.provisioner_id}/{s.worker_type}"
    await s.start_worker("fn", app=APP, env={function_app.TASK_QUEUE_ENV: task_queue}, flags=flags)
    root = ensure_root_client(s.directory / "clients.json")
    app = App(
        root_url=s.root_url,
        credentials={"clientId": root.client_id, "accessToken": root.access_token},
        task_queue=task_queue,
    )
    function_app.register(app)
    return s, app


@pytest.mark.slow(seconds=30)
@pytest.mark.parametrize(
    ("claim_work", "flags", "reported_under"),
    [
        # claims from Azure hints; the report goes in a resolveRuns batch, which carries no
        # traceparent, so the coordinator's report span is under the task's createTask
        (False, (), "createTask"),
        # claimWork; single reports carry the worker's report span as their traceparent
        (True, ("--no-batching",), "report"),
    ],
    ids=["azure-batched", "claim-work-single"],
)
async def test_one_trace_from_dispatch_to_report(
    e2e: MakeE2E,
    receiver: Receiver,
    exporting: None,
    claim_work: bool,
    flags: tuple[str, ...],
    reported_under: str,
) -> None:
    s, app = await _served(e2e, claim_work=claim_work, flags=flags)
    add = app.functions[f"{function_app.__name__}:add"]
    # the same call created through Taskcluster's client, which sends no traceparent
    untraced_id = slugid.nice()
    payload = encode_call(add.name, add.signature, (1, 1), {}).payload()
    await s.queue.createTask(
        untraced_id,
        task_definition(provisionerId=s.provisioner_id, workerType=s.worker_type, payload=payload),
    )
    async with app:
        handle = await add.dispatch(2, 3)
        assert await handle.result(timeout=30) == 5
        assert await app.handle(untraced_id).result(timeout=30) == 2
    app.close()
    task_id = handle.task_id
    names = ("dispatch", "createTask", "claim", "handler", "report", "reportCompleted")
    await _received(receiver, task_id, names)
    spans = {name: receiver.named(name, task_id) for name in names}
    assert {sp.trace_id for sp in spans.values()} == {spans["dispatch"].trace_id}
    assert spans["dispatch"].parent_id == ""  # the producer's span is the trace's root
    assert {name: sp.service for name, sp in spans.items()} == {
        "dispatch": "worker-sdk",
        "createTask": "queue-coordinator",
        "claim": "queue-coordinator",
        "handler": "worker-sdk",
        "report": "worker-sdk",
        "reportCompleted": "queue-coordinator",
    }
    parents = {name: sp.parent_id for name, sp in spans.items() if name != "dispatch"}
    assert parents == {
        "createTask": spans["dispatch"].span_id,
        "claim": spans["createTask"].span_id,
        "handler": spans["claim"].span_id,
        "report": spans["claim"].span_id,
        "reportCompleted": spans[reported_under].span_id,
    }
    task_queue_id = f"{s.provisioner_id}/{s.worker_type}"
    assert spans["dispatch"].attributes == {
        "taskId": task_id,
        "taskQueueId": task_queue_id,
        "function": f"{function_app.__name__}:add",
    }
    assert spans["createTask"].attributes == {"taskId": task_id, "taskQueueId": task_queue_id}
    run = {"taskId": task_id, "runId": 0, "taskQueueId": task_queue_id, "workerId": "fn"}
    assert spans["claim"].attributes == {**run, "workerGroup": s.worker_group}
    assert spans["handler"].attributes == run
    assert spans["report"].attributes == {**run, "resolution": "completed"}
    assert spans["reportCompleted"].attributes == {
        **run,
        "state": "completed",
        "reasonResolved": "completed",
    }

    # createTask without a traceparent begins a trace, which the run's spans continue
    await _received(receiver, untraced_id, names[1:])
    untraced = {name: receiver.named(name, untraced_id) for name in names[1:]}
    assert untraced["createTask"].parent_id == ""
    assert untraced["createTask"].trace_id != spans["dispatch"].trace_id
    assert {sp.trace_id for sp in untraced.values()} == {untraced["createTask"].trace_id}
    assert untraced["claim"].parent_id == untraced["createTask"].span_id
    assert untraced["handler"].parent_id == untraced["claim"].span_id


async def _received(receiver: Receiver, task_id: str, names: tuple[str, ...]) -> None:
    """Wait for the spans ``names`` of ``task_id``."""

    async def all_received() -> bool:
        return all(
            any(sp.name == name and sp.attributes.get("taskId") == task_id for sp in receiver.spans)
            for name in names
        )

    await wait_until(all_received, within=20, what=f"the spans {names} of {task_id}")


@pytest.mark.slow(seconds=20)
async def test_nothing_of_opentelemetry_is_imported_when_the_endpoint_is_unset(
    e2e: MakeE2E, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    # each import the processes make, written to their logs
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    s, app = await _served(e2e, claim_work=True)
    async with app:
        handle = await app.functions[f"{function_app.__name__}:add"].dispatch(2, 3)
        assert await handle.result(timeout=30) == 5
    app.close()
    imported = {
        "coordinator": _imported(s.coordinator_process.log_path.read_text()),
        "worker": _imported(s.workers[0].log()),
    }
    # the import log is there: it names the modules serving the run
    assert "coordinator.api.claims" in imported["coordinator"]
    assert "worker_sdk.worker" in imported["worker"]
    assert {
        process: sorted(m for m in modules if m.split(".")[0] == "opentelemetry")
        for process, modules in imported.items()
    } == {"coordinator": [], "worker": []}


def _imported(log: str) -> set[str]:
    """The modules a log of ``PYTHONPROFILEIMPORTTIME`` lines names (``import time: self |
    cumulative | module``)."""
    return {
        line.rpartition("|")[2].strip()
        for line in log.splitlines()
        if line.startswith("import time:")
    }
