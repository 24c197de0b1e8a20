"""The worker SDK's artifacts against the coordinator test double
(tests/fixtures/coordinator_double.py): ``TaskRun.upload_artifact`` and its siblings
(createArtifact signed with the run's current credentials, then the bytes PUT to the
putUrl), their retries, and the run log, ``public/logs/live_backing.log``, of a run whose
handler logged or raised: carried in its report when small, uploaded before it otherwise.

Handlers that run in a child process (``isolation="process"``) are module-level functions,
because the child imports its handler by name.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from devharness.waiting import wait_until
from tests.fixtures.coordinator_double import CoordinatorDouble, Upload, eventually, hint_text
from tests.fixtures.sdk import make_worker, reports, running
from worker_sdk import RequestFailed, TaskRun
from worker_sdk.artifacts import UPLOAD_ATTEMPTS
from worker_sdk.cli import parse_options
from worker_sdk.client import MAX_INLINE_ARTIFACT_BYTES
from worker_sdk.run_log import GZIPPED_AS_WRITTEN_PAST, RUN_LOG_NAME, STORED_UP_TO, RunLog

log = logging.getLogger(__name__)


def log_of(double: CoordinatorDouble, task_id: str, run_id: int = 0) -> str:
    """The run log the worker sent for a run (in its report or uploaded), checked to be
    gzipped text/plain."""
    upload = double.uploads[(task_id, run_id, RUN_LOG_NAME)]
    assert (upload.content_type, upload.content_encoding) == ("text/plain", "gzip")
    return gzip.decompress(upload.content).decode()


def position(double: CoordinatorDouble, route: str, detail: str) -> int:
    """Where the first request of ``route`` whose detail mentions ``detail`` is in
    ``double.requests``."""
    for index, (name, seen) in enumerate(double.requests):
        if name == route and detail in seen.split(","):
            return index
    raise AssertionError(f"no {route} request for {detail}")


def report_position(double: CoordinatorDouble, task_id: str) -> int:
    """Where the report of ``task_id``'s run 0 is in ``double.requests`` (single or batched)."""
    routes = ("resolveRuns", "completed", "failed", "exception")
    return min(
        index
        for index, (name, seen) in enumerate(double.requests)
        if name in routes and f"{task_id}/0" in seen.split(",")
    )


async def test_bytes_and_a_file_are_uploaded_through_the_put_url(
    double: CoordinatorDouble, tmp_path: Path
) -> None:
    report = tmp_path / "report.json"
    report.write_bytes(b'{"line": "%d"}\n' * 300_000)  # about 4.5 MB, several chunks
    expires = datetime.now(UTC) + timedelta(days=3)
    double.add_task("t1")

    async def handle(run: TaskRun) -> None:
        await run.upload_artifact("public/hello.txt", b"hello")
        await run.upload_artifact("public/report.json", report)
        await run.upload_artifact("public/report-again.json", str(report), content_encoding="br")
        await run.upload_artifact("private/blob.unknownext", b"\x00\x01", expires=expires)
        await run.upload_artifact("public/page", b"<p>", content_type="text/html")

    async with running(make_worker(double, handle)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert reports(double) == {"t1": ("completed", None)}
    task_expires = double.tasks["t1"].definition["expires"]
    expected = {
        "public/hello.txt": (b"hello", "text/plain", None, task_expires),
        "public/report.json": (report.read_bytes(), "application/json", None, task_expires),
        "public/report-again.json": (report.read_bytes(), "application/json", "br", task_expires),
        "private/blob.unknownext": (
            b"\x00\x01",
            "application/octet-stream",
            None,
            expires.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        ),
        "public/page": (b"<p>", "text/html", None, task_expires),
    }
    for name, (content, content_type, encoding, expiry) in expected.items():
        assert double.uploads[("t1", 0, name)] == Upload(
            content=content, content_type=content_type, content_encoding=encoding
        ), name
        assert double.artifacts[("t1", 0, name)] == {
            "storageType": "s3",
            "expires": expiry,
            "contentType": content_type,
            "contentLength": len(content),
        }, name
    # the name's slashes travel percent-encoded, as the official client sends them
    assert "t1/0/public/report.json" in double.routes("createArtifact")


async def test_a_sync_handler_creates_every_kind_of_artifact(
    double: CoordinatorDouble, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("noted")
    double.add_task("t1")

    def handle(run: TaskRun) -> None:
        run.blocking.upload_artifact("public/notes.txt", notes)
        run.blocking.create_link_artifact("public/latest.txt", "public/notes.txt")
        run.blocking.create_reference_artifact(
            "public/elsewhere", "https://example.com/x", "text/html"
        )
        run.blocking.create_error_artifact(
            "public/missing.bin", "file-missing-on-worker", "the build made none"
        )

    async with running(make_worker(double, handle)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert reports(double) == {"t1": ("completed", None)}
    expires = double.tasks["t1"].definition["expires"]
    assert double.uploads[("t1", 0, "public/notes.txt")].content == b"noted"
    assert double.artifacts[("t1", 0, "public/latest.txt")] == {
        "storageType": "link",
        "artifact": "public/notes.txt",
        "expires": expires,
    }
    assert double.artifacts[("t1", 0, "public/elsewhere")] == {
        "storageType": "reference",
        "url": "https://example.com/x",
        "contentType": "text/html",
        "expires": expires,
    }
    assert double.artifacts[("t1", 0, "public/missing.bin")] == {
        "storageType": "error",
        "reason": "file-missing-on-worker",
        "message": "the build made none",
        "expires": expires,
    }


async def test_blocking_calls_are_refused_on_a_running_loop_and_a_missing_file_creates_nothing(
    double: CoordinatorDouble, tmp_path: Path
) -> None:
    double.add_task("t1")
    raised: list[BaseException] = []

    async def handle(run: TaskRun) -> None:
        try:
            run.blocking.create_link_artifact("public/a", "public/b")
        except RuntimeError as error:
            raised.append(error)
        try:
            await run.upload_artifact("public/gone", tmp_path / "gone")
        except FileNotFoundError as error:
            raised.append(error)

    async with running(make_worker(double, handle, run_log=False)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert [type(error) for error in raised] == [RuntimeError, FileNotFoundError]
    assert "sync handlers" in str(raised[0])
    assert double.routes("createArtifact") == []


async def test_transient_failures_repeat_create_artifact_then_the_put(
    double: CoordinatorDouble,
) -> None:
    double.faults["createArtifact"] = [503, 0]  # 0: the connection drops
    # (a dropped PUT aiohttp itself sends again, once, when it can)
    double.faults["uploadArtifact"] = [503, 429]
    double.add_task("t1")

    async def handle(run: TaskRun) -> None:
        await run.upload_artifact("public/a.txt", b"persistent")

    async with running(make_worker(double, handle, run_log=False)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert reports(double) == {"t1": ("completed", None)}
    assert double.routes("createArtifact") == ["t1/0/public/a.txt"] * UPLOAD_ATTEMPTS
    assert double.routes("uploadArtifact") == ["t1/0/public/a.txt"] * 3
    assert double.uploads[("t1", 0, "public/a.txt")].content == b"persistent"


async def test_an_upload_that_keeps_failing_raises_to_the_handler_and_the_run_is_reported(
    double: CoordinatorDouble,
) -> None:
    double.faults["uploadArtifact"] = [503] * UPLOAD_ATTEMPTS
    double.add_task("caught")
    double.add_task("uncaught", hint=False)
    caught: list[RequestFailed] = []

    async def handle(run: TaskRun) -> None:
        if run.task_id == "caught":
            try:
                await run.upload_artifact("public/a.txt", b"never")
            except RequestFailed as error:
                caught.append(error)
        else:
            double.faults["createArtifact"] = [403]  # refused: raised at once
            await run.upload_artifact("public/b.txt", b"never either")

    async with running(make_worker(double, handle)):
        await eventually(lambda: len(double.reports) == 1, what="the first report")
        double.put("lowest", hint_text("uncaught", 0))
        await eventually(lambda: len(double.reports) == 2, what="both reports")
    assert reports(double) == {"caught": ("completed", None), "uncaught": ("failed", None)}
    [error] = caught
    assert (error.status, error.code, error.transient) == (503, "Injected", True)
    assert "?" not in error.url, "the putUrl's signature stays out of messages"
    assert double.routes("uploadArtifact").count("caught/0/public/a.txt") == UPLOAD_ATTEMPTS
    assert double.routes("createArtifact").count("uncaught/0/public/b.txt") == 1
    assert ("uncaught", 0, "public/b.txt") not in double.artifacts
    # both runs' logs went out in their reports; the failure's with its traceback
    assert not any(RUN_LOG_NAME in detail for _, detail in double.requests)
    assert {"caught", "uncaught"} <= {key[0] for key in double.uploads if key[2] == RUN_LOG_NAME}
    text = log_of(double, "uncaught")
    assert "Traceback (most recent call last)" in text
    assert "RequestFailed: POST" in text and "403 Injected" in text
    assert text.rstrip().endswith("403 Injected: injected 403")


async def test_a_run_log_that_cannot_be_uploaded_does_not_hold_back_the_report(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    double.inline_artifacts = False  # an older coordinator: the log goes as an upload
    double.faults["createArtifact"] = [400]
    double.add_task("t1")

    def handle(run: TaskRun) -> None:
        log.warning("a line to upload")

    async with running(make_worker(double, handle)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert reports(double) == {"t1": ("completed", None)}
    assert double.routes("createArtifact") == [f"t1/0/{RUN_LOG_NAME}"]
    [line] = [r.getMessage() for r in caplog.records if "run log not uploaded" in r.getMessage()]
    assert line.startswith("run log not uploaded taskId=t1 runId=0 error=POST")


async def test_a_small_run_log_rides_in_the_batched_report(double: CoordinatorDouble) -> None:
    double.add_task("t1")

    def handle(run: TaskRun) -> None:
        log.warning("a line for the report")

    async with running(make_worker(double, handle)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert reports(double) == {"t1": ("completed", None)}
    # no request of its own: neither createArtifact nor an upload
    assert double.routes("createArtifact") == [] and double.routes("uploadArtifact") == []
    assert double.routes("resolveRuns") == ["t1/0"]
    assert "WARNING" in log_of(double, "t1") and "a line for the report" in log_of(double, "t1")


async def test_a_run_log_past_the_inline_limit_is_uploaded_before_the_report(
    double: CoordinatorDouble,
) -> None:
    double.add_task("t1")

    def handle(run: TaskRun) -> None:
        for _ in range(3000):  # random hex: about 96 KiB once gzipped
            log.warning(os.urandom(32).hex())

    async with running(make_worker(double, handle)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert double.routes("createArtifact") == [f"t1/0/{RUN_LOG_NAME}"]
    assert position(double, "uploadArtifact", f"t1/0/{RUN_LOG_NAME}") < report_position(
        double, "t1"
    )
    assert len(double.uploads[("t1", 0, RUN_LOG_NAME)].content) > MAX_INLINE_ARTIFACT_BYTES
    assert len(log_of(double, "t1").splitlines()) == 3001


async def test_an_older_coordinator_gets_run_logs_uploaded_before_each_report(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    double.inline_artifacts = False
    for task_id in ("t1", "t2"):
        double.add_task(task_id, hint=task_id == "t1")

    def handle(run: TaskRun) -> None:
        log.warning("a line from %s", run.task_id)

    async with running(make_worker(double, handle)):
        await eventually(lambda: len(double.reports) == 1, what="the first report")
        double.put("lowest", hint_text("t2", 0))
        await eventually(lambda: len(double.reports) == 2, what="the second report")
    assert reports(double) == {"t1": ("completed", None), "t2": ("completed", None)}
    # the refusal costs one batch: the first run's report then goes singly, the second
    # run's is batched, each after its log's upload
    assert double.routes("resolveRuns") == ["t1/0", "t2/0"]
    assert double.routes("completed") == ["t1/0"]
    for task_id, report in (("t1", "completed"), ("t2", "resolveRuns")):
        uploaded = position(double, "uploadArtifact", f"{task_id}/0/{RUN_LOG_NAME}")
        assert uploaded < position(double, report, f"{task_id}/0")
        assert f"a line from {task_id}" in log_of(double, task_id)
    lines = [r.getMessage() for r in caplog.records]
    assert lines.count("reports carry no artifacts from now on, they are uploaded") == 1


def _barrier_handler(barrier: threading.Barrier) -> Any:
    def handle(run: TaskRun) -> None:
        for n in range(3):
            log.warning("%s says %d", run.task_id, n)
            barrier.wait(timeout=10)  # the other run logs in between
        if run.task_id == "t-fail":
            raise RuntimeError("kaboom")

    return handle


def _event_handler(both: asyncio.Event, started: set[str]) -> Any:
    async def handle(run: TaskRun) -> None:
        started.add(run.task_id)
        if len(started) == 2:
            both.set()
        for n in range(3):
            log.warning("%s says %d", run.task_id, n)
            await both.wait()
            await asyncio.sleep(0.01)
        if run.task_id == "t-fail":
            raise RuntimeError("kaboom")

    return handle


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_each_run_log_has_its_own_runs_records_and_a_failure_its_traceback(
    double: CoordinatorDouble, kind: str
) -> None:
    double.add_task("t-ok")
    double.add_task("t-fail")
    handle = (
        _event_handler(asyncio.Event(), set())
        if kind == "async"
        else _barrier_handler(threading.Barrier(2))
    )

    async with running(make_worker(double, handle, capacity=2)):
        await eventually(lambda: len(double.reports) == 2, what="both reports")
    assert reports(double) == {"t-ok": ("completed", None), "t-fail": ("failed", None)}
    ok, failed = log_of(double, "t-ok"), log_of(double, "t-fail")
    assert [line.split(" ", 1)[1] for line in ok.splitlines()] == [
        f"WARNING {__name__}: t-ok says 0",
        f"WARNING {__name__}: t-ok says 1",
        f"WARNING {__name__}: t-ok says 2",
        "INFO worker_sdk.worker: run t-ok/0 resolved completed",
    ]
    assert "t-ok says" not in failed
    assert f"WARNING {__name__}: t-fail says 2" in failed
    assert "resolved failed, the handler raised:\nTraceback (most recent call last)" in failed
    assert failed.rstrip().endswith("RuntimeError: kaboom")
    # each line opens with the time in UTC, milliseconds
    stamp = ok.split(" ", 1)[0]
    assert datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").year >= 2026


async def test_a_run_that_logged_nothing_uploads_no_log_unless_its_handler_raised(
    double: CoordinatorDouble,
) -> None:
    for task_id in ("t-silent", "t-line", "t-raises"):
        double.add_task(task_id)

    async def handle(run: TaskRun) -> None:
        if run.task_id == "t-line":
            log.warning("one line")
        if run.task_id == "t-raises":
            raise RuntimeError("failed without a word")

    async with running(make_worker(double, handle, capacity=3)):
        await eventually(lambda: len(double.reports) == 3, what="the reports")
    assert reports(double) == {
        "t-silent": ("completed", None),
        "t-line": ("completed", None),
        "t-raises": ("failed", None),
    }
    # the silent run sent no log, the others theirs in their reports
    assert sorted(key[0] for key in double.uploads) == ["t-line", "t-raises"]
    assert [line.split(" ", 1)[1] for line in log_of(double, "t-line").splitlines()] == [
        f"WARNING {__name__}: one line",
        "INFO worker_sdk.worker: run t-line/0 resolved completed",
    ]
    failed = log_of(double, "t-raises")
    assert "resolved failed, the handler raised:\nTraceback (most recent call last)" in failed
    assert failed.rstrip().endswith("RuntimeError: failed without a word")


def test_a_run_log_is_empty_until_written() -> None:
    run_log = RunLog()
    assert run_log.empty
    run_log.write("a line")
    assert not run_log.empty


async def test_no_run_log_uploads_nothing(double: CoordinatorDouble) -> None:
    double.add_task("t1")

    async def handle(run: TaskRun) -> None:
        log.warning("not kept")

    async with running(make_worker(double, handle, run_log=False)):
        await eventually(lambda: len(double.reports) == 1, what="the report")
    assert double.routes("createArtifact") == []
    assert double.uploads == {}


def test_the_command_line_turns_the_run_log_off() -> None:
    argv = ["--root-url", "http://127.0.0.1:1", "--task-queue", "p/w", "m:f"]
    assert parse_options(argv, {}).worker.run_log is True
    assert parse_options(["--no-run-log", *argv], {}).worker.run_log is False


def test_a_run_log_is_bounded_and_then_says_so() -> None:
    run_log = RunLog(limit=100)
    for n in range(10):
        run_log.write(f"line {n} " + "x" * 20)
    content = run_log.gzipped()
    assert gzip.decompress(content).decode().splitlines() == [
        "line 0 " + "x" * 20,
        "line 1 " + "x" * 20,
        "line 2 " + "x" * 20,
        "[run log truncated: it passed 100 bytes]",
    ]
    run_log.write("after the end")
    assert run_log.gzipped() == content


@pytest.mark.parametrize("lines", [0, 1, 3, 30, 2_000])
def test_a_run_log_gzips_what_was_written_short_or_past_its_streaming_size(lines: int) -> None:
    written = [f"line {n} " + "y" * (n % 97) for n in range(lines)]
    run_log = RunLog()
    for line in written:
        run_log.write(line)
    text = "".join(line + "\n" for line in written)
    # 2,000 lines pass the size from which the log is gzipped as lines arrive; 30 lines pass
    # the size up to which it is stored uncompressed
    assert (len(text.encode()) > GZIPPED_AS_WRITTEN_PAST) == (lines == 2_000)
    assert (len(text.encode()) <= STORED_UP_TO) == (lines <= 3)
    content = run_log.gzipped()
    assert gzip.decompress(content).decode() == text
    if lines <= 3:
        assert text.encode() in content  # stored as it is
    else:
        assert len(content) < len(text.encode())  # compressed
    assert run_log.gzipped() == content


# --- isolation="process" --------------------------------------------------------------------


async def _renewed(run: TaskRun) -> None:
    """Wait until the worker has renewed the run's credentials."""
    first = run.credentials.access_token
    await wait_until(lambda: run.credentials.access_token != first, what="renewed credentials")


def isolated(run: TaskRun) -> None:
    """In a child: log, wait for the worker to renew the run's credentials (so the upload is
    signed with ones the child did not start with), upload, and fail if asked."""
    log.warning("child pid=%d", os.getpid())
    asyncio.run(_renewed(run))
    run.blocking.upload_artifact("public/from-child.txt", f"pid {os.getpid()}".encode())
    if run.payload.get("fail"):
        raise ValueError("child failed")


async def isolated_async(run: TaskRun) -> None:
    """:func:`isolated`, async."""
    log.warning("child pid=%d", os.getpid())
    await _renewed(run)
    await run.upload_artifact("public/from-child.txt", f"pid {os.getpid()}".encode())
    if run.payload.get("fail"):
        raise ValueError("child failed")


@pytest.mark.parametrize("handler", [isolated, isolated_async], ids=["sync", "async"])
async def test_a_child_process_uploads_with_renewed_credentials_and_logs_to_its_run(
    double: CoordinatorDouble, handler: Any
) -> None:
    double.claim_timeout_s = 3.0  # reclaimed within about two seconds
    double.add_task("t-ok")
    double.add_task("t-fail", payload={"fail": True})

    async with running(make_worker(double, handler, capacity=2, isolation="process")):
        await eventually(lambda: len(double.reports) == 2, within=30, what="both reports")
    assert reports(double) == {"t-ok": ("completed", None), "t-fail": ("failed", None)}
    for task_id in ("t-ok", "t-fail"):
        content = double.uploads[(task_id, 0, "public/from-child.txt")].content.decode()
        assert content.startswith("pid ") and int(content[4:]) != os.getpid()
        text = log_of(double, task_id)
        assert f"WARNING {__name__}: child pid={content[4:]}" in text
        assert "artifact uploaded" in text and "public/from-child.txt" in text
    assert "ValueError: child failed" in log_of(double, "t-fail")
    assert "ValueError" not in log_of(double, "t-ok")
