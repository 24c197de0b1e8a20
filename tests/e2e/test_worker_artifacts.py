"""End to end: the worker SDK's artifacts and run log, from real ``queue-worker`` processes to
a real ``queue-coordinator serve`` process (SQLite, Hawk authentication on, Azurite), read
back with the official Python client (``taskcluster.Queue``, the sync one, in a thread).

The workers run tests/e2e/artifact_handlers.py, whose handler logs known lines and makes
known artifacts (bytes, a file streamed in chunks, a link, an error). Checked: the artifacts
are listed and read back byte for byte, on both blob backends (the directory, and Azure
Blob Storage on Azurite: the coordinator restarted with ``COORDINATOR_ARTIFACTS=azure``);
each run's ``public/logs/live_backing.log`` holds its own handler's lines and none of a run
beside it in the same worker; a handler that raises leaves its traceback there;
``--no-run-log`` uploads no log; under ``--isolation process`` the child's records reach the
log.
"""

from __future__ import annotations

import gzip
import re
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from taskcluster.aio.download import downloadArtifactToBuf
from yarl import URL

from coordinator.service.clients_file import ensure_root_client
from tests.e2e import artifact_handlers as handlers
from tests.fixtures import workers
from tests.fixtures.clients import Queue, rejected
from tests.fixtures.workers import E2E, MakeE2E, WorkerProcess
from worker_sdk.run_log import RUN_LOG_NAME

HANDLER = "tests.e2e.artifact_handlers:handle"

RUN_LOG_LINE = re.compile(r"(?P<time>\S+Z) (?P<level>[A-Z]+) (?P<logger>\S+): (?P<message>.*)")
"""One record's first line in a run log (worker_sdk.run_log.RunLogFormatter)."""


@pytest.fixture(autouse=True)
def artifact_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``e2e`` fixture's workers run :data:`HANDLER` instead of its journaling one."""
    monkeypatch.setattr(workers, "HANDLER", HANDLER)


@dataclass(kw_only=True)
class Reader:
    """Reads a test's artifacts back: the official client signed as root, and anonymous."""

    root: Queue
    anonymous: Queue
    aio: Any
    """``taskcluster.aio.Queue`` signed as root, for the client's download helpers."""
    http: aiohttp.ClientSession

    async def listed(self, task_id: str) -> dict[str, dict[str, Any]]:
        """Every artifact of run 0 (listArtifacts, all pages), by name."""
        found: dict[str, dict[str, Any]] = {}
        query: dict[str, str] = {}
        for _ in range(100):
            page = await self.root.listArtifacts(task_id, "0", query=query)
            found.update((artifact["name"], artifact) for artifact in page["artifacts"])
            if "continuationToken" not in page:
                return found
            query = {"continuationToken": page["continuationToken"]}
        raise AssertionError(f"listArtifacts of {task_id} did not end")

    async def fetched(self, task_id: str, name: str) -> tuple[str, dict[str, str], bytes]:
        """getArtifact of run 0's ``name``, anonymously (every name here is public/), then
        its URL fetched as it is: the URL, the headers and the bytes, undecoded."""
        answer = await self.anonymous.getArtifact(task_id, "0", name)
        url: str = answer["url"]
        async with self.http.get(URL(url, encoded=True), auto_decompress=False) as response:
            assert response.status == 200, await response.text()
            return url, dict(response.headers), await response.read()

    async def run_log(self, task_id: str) -> str:
        """Run 0's log, checked to be gzipped text/plain, decoded."""
        _, headers, data = await self.fetched(task_id, RUN_LOG_NAME)
        assert (headers["Content-Type"], headers["Content-Encoding"]) == ("text/plain", "gzip")
        return gzip.decompress(data).decode()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def reader(s: E2E, http: aiohttp.ClientSession) -> Reader:
    root = ensure_root_client(s.directory / "clients.json")
    credentials = {"clientId": root.client_id, "accessToken": root.access_token}
    return Reader(
        root=Queue("sync", s.root_url, credentials),
        anonymous=Queue("sync", s.root_url),
        aio=s.queue,
        http=http,
    )


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One record of a run log."""

    level: str
    logger: str
    message: str
    """With the lines that follow the first (a traceback), if any."""


def entries(text: str) -> Iterator[Entry]:
    """The records of a run log, in order."""
    current: dict[str, str] | None = None
    for line in text.splitlines():
        match = RUN_LOG_LINE.fullmatch(line)
        if match is None:
            assert current is not None, f"a run log starts with a record: {line!r}"
            current["message"] += "\n" + line
            continue
        if current is not None:
            yield Entry(**current)
        current = {key: match[key] for key in ("level", "logger", "message")}
    if current is not None:
        yield Entry(**current)


def handler_lines(log: list[Entry]) -> list[str]:
    """The messages the handler's own logger wrote."""
    return [entry.message for entry in log if entry.logger == handlers.__name__]


def ending(log: list[Entry]) -> str:
    """The worker's last line of a run log: how the run was resolved."""
    last = log[-1]
    assert (last.level, last.logger) == ("INFO", "worker_sdk.worker"), last
    return last.message


async def stop(worker: WorkerProcess) -> None:
    worker.signal(signal.SIGTERM)
    assert await worker.exited() == 0, worker.log()[-3000:]


async def use_backend(s: E2E, backend: str) -> None:
    """Restart the test's coordinator process with ``COORDINATOR_ARTIFACTS=backend`` (the
    e2e fixture starts it on the directory, the default)."""
    if backend == "directory":
        return
    await s.coordinator_process.terminate()
    s.coordinator_process.serve.env["COORDINATOR_ARTIFACTS"] = backend
    await s.coordinator_process.start()


async def artifacts_task(s: E2E, barrier: Path, *, meet: int = 1) -> str:
    """A task whose handler makes :data:`artifact_handlers.ARTIFACTS` once ``meet`` runs
    have reached ``barrier``."""
    return await s.create(do="artifacts", barrier=str(barrier), meet=meet)


async def check_artifacts(r: Reader, task_id: str, backend: str) -> None:
    """The handler's artifacts are listed and read back as it made them."""
    listed = await r.listed(task_id)
    kinds = {name: artifact["storageType"] for name, artifact in listed.items()}
    assert kinds == {**handlers.ARTIFACTS, RUN_LOG_NAME: "s3"}
    assert listed[handlers.HELLO]["contentType"] == "text/plain"
    assert listed[handlers.FILE]["contentType"] == "application/octet-stream"
    assert listed[RUN_LOG_NAME]["contentType"] == "text/plain"

    url, headers, data = await r.fetched(task_id, handlers.HELLO)
    assert data == handlers.hello_of(task_id)
    assert headers["Content-Type"] == "text/plain"
    # Azure serves its own blobs; the coordinator serves the directory's.
    assert ("/artifact-download/" in url) == (backend == "directory"), url
    _, _, linked = await r.fetched(task_id, handlers.LINK)
    assert linked == handlers.hello_of(task_id)

    content, content_type = await downloadArtifactToBuf(
        taskId=task_id, runId=0, name=handlers.FILE, queueService=r.aio
    )
    assert (bytes(content), content_type) == (handlers.file_of(task_id), "application/octet-stream")

    status, error = await rejected(r.anonymous.getArtifact(task_id, "0", handlers.MISSING))
    assert (status, error) == (
        424,
        {"reason": "file-missing-on-worker", "message": handlers.missing_message(task_id)},
    )


# --- (a) artifacts and the run log of concurrent runs, on both backends -------------------------


@pytest.mark.parametrize("backend", ["directory", "azure"])
async def test_a_handler_s_artifacts_and_log_read_back_and_runs_side_by_side_keep_their_logs(
    e2e: MakeE2E, http: aiohttp.ClientSession, tmp_path: Path, backend: str
) -> None:
    s = await e2e(claim_work=True)
    await use_backend(s, backend)
    first, second = [await artifacts_task(s, tmp_path / "barrier", meet=2) for _ in range(2)]
    worker = await s.start_worker("w", capacity=2)
    await s.resolved(first, second)
    assert await s.runs(first) == [("completed", "scheduled", "completed", "w")]
    assert await s.runs(second) == [("completed", "scheduled", "completed", "w")]
    await stop(worker)

    r = reader(s, http)
    for task_id, other in ((first, second), (second, first)):
        await check_artifacts(r, task_id, backend)
        text = await r.run_log(task_id)
        log = list(entries(text))
        assert handler_lines(log) == handlers.lines_of(task_id, worker.process.pid)
        assert other not in text, "a run beside it in the worker wrote to its log"
        # Besides the handler's lines: the SDK's own, about this run's artifacts, then the end.
        assert ending(log) == f"run {task_id}/0 resolved completed"
        for entry in log[:-1]:
            if entry.logger != handlers.__name__:
                assert entry.logger == "worker_sdk.artifacts", entry
                assert f"taskId={task_id} runId=0 " in entry.message, entry


# --- (b) a handler that raises ------------------------------------------------------------------


async def test_a_handler_that_raises_fails_its_run_and_leaves_its_traceback_in_the_log(
    e2e: MakeE2E, http: aiohttp.ClientSession
) -> None:
    s = await e2e(claim_work=True)
    task_id = await s.create(do="raise")
    worker = await s.start_worker("w")
    await s.resolved(task_id)
    assert await s.runs(task_id) == [("failed", "scheduled", "failed", "w")]
    await stop(worker)

    r = reader(s, http)
    assert list(await r.listed(task_id)) == [RUN_LOG_NAME]
    log = list(entries(await r.run_log(task_id)))
    assert handler_lines(log) == [f"about to fail {task_id}"]
    end = ending(log)
    assert end.startswith(f"run {task_id}/0 resolved failed, the handler raised:\nTraceback ")
    assert "in handle\n" in end  # the handler's own frame
    assert end.endswith(f"RuntimeError: deliberate failure of {task_id}")


# --- (c) --no-run-log ---------------------------------------------------------------------------


async def test_no_run_log_uploads_no_log_and_the_handler_s_artifacts_still(
    e2e: MakeE2E, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    s = await e2e(claim_work=True)
    task_id = await artifacts_task(s, tmp_path / "barrier")
    worker = await s.start_worker("w", flags=["--no-run-log"])
    await s.resolved(task_id)
    assert await s.runs(task_id) == [("completed", "scheduled", "completed", "w")]
    await stop(worker)

    r = reader(s, http)
    listed = await r.listed(task_id)
    assert {name: a["storageType"] for name, a in listed.items()} == handlers.ARTIFACTS
    status, error = await rejected(r.anonymous.getArtifact(task_id, "0", RUN_LOG_NAME))
    assert (status, error["code"]) == (404, "ResourceNotFound")
    # The lines went only to the worker's own output.
    assert handlers.lines_of(task_id, worker.process.pid)[-1] in worker.log()


# --- (d) --isolation process ----------------------------------------------------------------------


async def test_under_process_isolation_the_child_s_records_reach_the_run_log(
    e2e: MakeE2E, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    s = await e2e(claim_work=True)
    task_id = await artifacts_task(s, tmp_path / "barrier")
    worker = await s.start_worker("w", flags=["--isolation", "process"])
    await s.resolved(task_id)
    assert await s.runs(task_id) == [("completed", "scheduled", "completed", "w")]
    await stop(worker)

    r = reader(s, http)
    await check_artifacts(r, task_id, "directory")
    log = list(entries(await r.run_log(task_id)))
    lines = handler_lines(log)
    assert lines, "no record of the child's handler"
    pid = int(lines[0].rpartition(" ")[2])
    assert pid != worker.process.pid, "the handler ran in the worker's own process"
    assert lines == handlers.lines_of(task_id, pid)
    assert ending(log) == f"run {task_id}/0 resolved completed"
