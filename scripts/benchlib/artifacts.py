"""Rows 8 and 9, artifacts (issue 25): artifact bytes through a ``queue-coordinator serve``
process, against the same bytes straight to the same backend in the same run.

* ``artifacts-<backend>`` (``directory``, the default backend: files under the coordinator's
  data directory; ``azure``: ``COORDINATOR_ARTIFACTS=azure``, block blobs in a fresh in-memory
  Azurite): four phases of ``artifact_count`` artifacts of ``artifact_mib`` MiB each, one at a
  time, every phase after one unmeasured transfer of the same size (connections, the
  container, thread pools). Rows, each ``artifacts-<backend>-`` and:

  - ``upload``: createArtifact (s3) on a task's running run, then the bytes PUT to its
    ``putUrl``;
  - ``upload-direct``: the same bytes to the backend without the coordinator: a file in the
    same filesystem written in the directory backend's write size, fsynced and renamed into
    place as the backend does; or azure-storage-blob staging blocks of the Azure backend's
    block size and committing them;
  - ``download``: getArtifact (its 303 not followed), then a GET of its ``Location`` (the
    coordinator's signed download route, or Azurite's SAS URL) read to the end;
  - ``download-direct``: the file read back in the directory backend's read size, or
    azure-storage-blob downloading the blob in the Azure backend's chunk size.

  The rate is MiB/s (the items are MiB, so CPU is ms per MiB); latency is per artifact.

* ``artifact-1gib``: one upload of ``big_artifact_mib`` MiB into a coordinator (directory
  backend, SQLite store, no Azure), streamed by a child process (``python -m
  benchlib.artifacts``, a random MiB repeated), while the harness samples the coordinator's
  RSS every 20 ms and starts ``create_rate`` createTask calls a second (open loop, so a slow
  answer delays no later call); then createTask alone as long again. Rows ``artifact-1gib``
  (the upload; its figures and notes hold the RSS before, at the peak and after),
  ``artifact-1gib-createtask`` (createTask during the upload) and
  ``artifact-1gib-createtask-quiet`` (after it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Literal, Protocol
from urllib.parse import quote

import aiohttp
import psutil
from azure.storage.blob import BlobBlock, ContentSettings
from azure.storage.blob.aio import BlobServiceClient, ContainerClient
from yarl import URL

from benchlib.common import (
    PYTHON,
    CpuMeter,
    Row,
    Settings,
    azurite_group,
    latency_fields,
    own_process,
    pids,
)
from benchlib.coordproc import Coordinator, TaskClient, coordinator, new_task_id
from coordinator.blobs.azure_blob import BLOCK_SIZE
from coordinator.blobs.directory import READ_SIZE, WRITE_SIZE
from coordinator.domain.records import to_iso
from devharness.azurite import AzuriteProcess
from devharness.processes import child_env, end_processes, spawn

Backend = Literal["directory", "azure"]

MIB = 1 << 20
CONTENT_TYPE = "application/octet-stream"
WORKER_GROUP = "bench"
WORKER_ID = "artifacts"
ARTIFACT_LIFETIME_MS = 86_400_000
"""Artifacts expire a day after the row (well before their task)."""
RSS_INTERVAL_S = 0.02
SLOWEST_UPLOAD_MIB_S = 10
"""The ``artifact-1gib`` upload is given up on (and the row fails) if it runs slower than this
after 30 s of slack."""
PHASES = ("upload", "upload-direct", "download", "download-direct")


def _name(i: int) -> str:
    return f"public/bench/{i}.bin"


def _check_length(received: int, expected: int, what: str) -> None:
    if received != expected:
        raise RuntimeError(f"{what}: {received} bytes instead of {expected}")


class _Side(Protocol):
    """One way of moving artifact ``i``'s bytes: through the coordinator, or straight."""

    async def upload(self, i: int) -> None: ...

    async def download(self, i: int) -> None: ...


def _profile(settings: Settings, workdir: Path) -> Path | None:
    """Where the coordinator's pyinstrument session goes with ``--profile``."""
    return workdir / "coordinator.pyisession" if settings.profile else None


# --- through the coordinator ------------------------------------------------------------------


async def _running_task(tasks: TaskClient, settings: Settings) -> str:
    """A new task whose run 0 is running (claimTask), to hang artifacts on."""
    [(task_id, definition)] = tasks.new_tasks(
        1,
        worker_type=f"wt-{uuid.uuid4().hex[:8]}",
        task_group_id=new_task_id(),
        priority=settings.priority,
    )
    await tasks.create(task_id, definition)
    await tasks.claim_task(task_id, worker_group=WORKER_GROUP, worker_id=WORKER_ID)
    return task_id


async def _put_url(tasks: TaskClient, task_id: str, name: str, length: int) -> str:
    """createArtifact of an s3 artifact of ``length`` bytes; its ``putUrl``."""
    body = {
        "storageType": "s3",
        "contentType": CONTENT_TYPE,
        "contentLength": length,
        "expires": to_iso(int(time.time() * 1000) + ARTIFACT_LIFETIME_MS),
    }
    answer = await tasks.create_artifact(task_id, 0, name, body)
    url: str = answer["putUrl"]
    return url


class _ThroughCoordinator:
    """Artifacts of run 0 of ``task_id``, moved as a worker and a downloader move them.

    :param api: the coordinator's API URL.
    :param payload: every artifact's bytes.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        tasks: TaskClient,
        api: str,
        task_id: str,
        payload: bytes,
    ) -> None:
        self._session = session
        self._tasks = tasks
        self._api = api
        self._task_id = task_id
        self._payload = payload

    async def upload(self, i: int) -> None:
        put_url = await _put_url(self._tasks, self._task_id, _name(i), len(self._payload))
        async with self._session.put(
            URL(put_url, encoded=True), data=self._payload, headers={"Content-Type": CONTENT_TYPE}
        ) as response:
            if response.status != 200:
                raise RuntimeError(f"upload answered {response.status}: {await response.text()}")

    async def download(self, i: int) -> None:
        # public/ names: anonymous getArtifact may read them, with --auth too.
        url = f"{self._api}/task/{self._task_id}/runs/0/artifacts/{quote(_name(i), safe='/')}"
        async with self._session.get(URL(url, encoded=True), allow_redirects=False) as response:
            if response.status != 303:
                raise RuntimeError(f"getArtifact answered {response.status}")
            location = response.headers["Location"]
        received = 0
        async with self._session.get(URL(location, encoded=True)) as response:
            if response.status != 200:
                raise RuntimeError(f"download answered {response.status}")
            async for chunk in response.content.iter_chunked(READ_SIZE):
                received += len(chunk)
        _check_length(received, len(self._payload), f"download of {_name(i)}")


# --- straight to the backend ------------------------------------------------------------------


def _write_file(path: Path, payload: bytes) -> None:
    """What the directory backend does with an upload: write a temporary file in
    :data:`WRITE_SIZE` pieces, fsync it, rename it into place, fsync the directory."""
    temp = path.with_name(f".tmp-{path.name}")
    view = memoryview(payload)
    with temp.open("xb") as file:
        for start in range(0, len(view), WRITE_SIZE):
            file.write(view[start : start + WRITE_SIZE])
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, path)
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _read_file(path: Path) -> int:
    """Read ``path`` to the end in :data:`READ_SIZE` pieces; how many bytes it held."""
    received = 0
    with path.open("rb") as file:
        while chunk := file.read(READ_SIZE):
            received += len(chunk)
    return received


class _DirectFiles:
    """Artifact ``i`` as the file ``<directory>/<i>.bin``, moved in a worker thread."""

    def __init__(self, directory: Path, payload: bytes) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._directory = directory
        self._payload = payload

    async def upload(self, i: int) -> None:
        await asyncio.to_thread(_write_file, self._directory / f"{i}.bin", self._payload)

    async def download(self, i: int) -> None:
        received = await asyncio.to_thread(_read_file, self._directory / f"{i}.bin")
        _check_length(received, len(self._payload), f"read of {i}.bin")


class _DirectBlobs:
    """Artifact ``i`` as the block blob ``<i>.bin`` of ``container``, moved as the Azure
    backend moves it."""

    def __init__(self, container: ContainerClient, payload: bytes) -> None:
        self._container = container
        self._payload = payload

    async def upload(self, i: int) -> None:
        blob = self._container.get_blob_client(f"{i}.bin")
        blocks: list[BlobBlock] = []
        for start in range(0, len(self._payload), BLOCK_SIZE):
            block = self._payload[start : start + BLOCK_SIZE]
            block_id = f"{len(blocks):08d}"
            await blob.stage_block(block_id, block, length=len(block))
            blocks.append(BlobBlock(block_id=block_id))
        await blob.commit_block_list(
            blocks, content_settings=ContentSettings(content_type=CONTENT_TYPE)
        )

    async def download(self, i: int) -> None:
        downloader = await self._container.get_blob_client(f"{i}.bin").download_blob()
        received = 0
        async for chunk in downloader.chunks():
            received += len(chunk)
        _check_length(received, len(self._payload), f"download of blob {i}.bin")


@contextlib.asynccontextmanager
async def _direct(
    backend: Backend, azurite: AzuriteProcess | None, workdir: Path, payload: bytes
) -> AsyncIterator[_Side]:
    """The straight way to ``backend``: files beside the coordinator's (same filesystem), or
    a container of its own in the same Azurite."""
    if azurite is None:
        yield _DirectFiles(workdir / "direct", payload)
        return
    async with BlobServiceClient.from_connection_string(
        azurite.connection_string, max_single_get_size=BLOCK_SIZE, max_chunk_get_size=BLOCK_SIZE
    ) as service:
        container = service.get_container_client(f"bench-direct-{uuid.uuid4().hex[:8]}")
        await container.create_container()
        yield _DirectBlobs(container, payload)


# --- the artifacts-<backend> rows -------------------------------------------------------------


async def _phase(
    row: Row, meter: CpuMeter, transfer: Callable[[int], Awaitable[None]], settings: Settings
) -> None:
    """``transfer(0)`` unmeasured, then ``transfer(1)`` .. ``transfer(artifact_count)`` one
    after the other, metered; fill ``row``."""
    await transfer(0)
    seconds: list[float] = []
    meter.start()
    begin = time.monotonic()
    for i in range(1, settings.artifact_count + 1):
        started = time.monotonic()
        await transfer(i)
        seconds.append(time.monotonic() - started)
    row.window = time.monotonic() - begin
    meter.stop()
    row.count = settings.artifact_count * settings.artifact_mib
    row.rate = row.count / row.window
    latency_fields(row, seconds)
    meter.fill(row)


def _rows(settings: Settings, backend: Backend) -> dict[str, Row]:
    size = f"{settings.artifact_count} x {settings.artifact_mib} MiB, one at a time"
    if backend == "directory":
        label = "directory backend"
        upload_direct = f"the same bytes written to a file ({WRITE_SIZE // MIB} MiB writes, fsync, "
        upload_direct += "rename), no coordinator"
        download_direct = f"the same files read ({READ_SIZE // MIB} MiB reads), no coordinator"
    else:
        label = "Azure backend (Azurite)"
        upload_direct = (
            f"the same bytes to Azurite with azure-storage-blob ({BLOCK_SIZE // MIB} MiB "
            "blocks staged, then committed), no coordinator"
        )
        download_direct = (
            f"the same blobs from Azurite with azure-storage-blob ({BLOCK_SIZE // MIB} MiB "
            "chunks), no coordinator"
        )
    titles = {
        "upload": "upload through the coordinator: createArtifact + PUT putUrl",
        "upload-direct": upload_direct,
        "download": "download through the coordinator: getArtifact 303 + GET its Location",
        "download-direct": download_direct,
    }
    return {
        phase: Row(
            key=f"artifacts-{backend}-{phase}",
            title=f"artifacts, {label}: {title}, {size}",
            unit="MiB/s",
        )
        for phase, title in titles.items()
    }


async def run(settings: Settings, backend: Backend) -> list[Row]:
    """The four rows of ``artifacts-<backend>``, with a fresh Azurite for ``azure``."""
    if backend == "azure":
        async with AzuriteProcess() as azurite:
            return await _compare(settings, backend, azurite)
    return await _compare(settings, backend, None)


async def _compare(
    settings: Settings, backend: Backend, azurite: AzuriteProcess | None
) -> list[Row]:
    rows = _rows(settings, backend)
    workdir = settings.workdir / f"artifacts-{backend}"
    payload = os.urandom(settings.artifact_mib * MIB)
    async with (
        coordinator(
            settings,
            store="sqlite",
            workdir=workdir,
            azure_connection_string=None if azurite is None else azurite.connection_string,
            profile=_profile(settings, workdir),
            env={"COORDINATOR_ARTIFACTS": backend},
        ) as running,
        aiohttp.ClientSession() as session,
        _direct(backend, azurite, workdir, payload) as direct,
    ):
        tasks = TaskClient(session, running)
        through = _ThroughCoordinator(
            session, tasks, running.api, await _running_task(tasks, settings), payload
        )
        client = {"client": own_process} | (
            {} if azurite is None else {"azurite": azurite_group(azurite.port)}
        )
        served = {"coordinator": pids(running.process)} | client
        # Each pair back to back, so that the machine's other load hits both alike.
        await _phase(rows["upload-direct"], CpuMeter(client), direct.upload, settings)
        await _phase(rows["upload"], CpuMeter(served), through.upload, settings)
        await _phase(rows["download"], CpuMeter(served), through.download, settings)
        await _phase(rows["download-direct"], CpuMeter(client), direct.download, settings)
    for phase in ("upload", "download"):
        through_rate, direct_rate = rows[phase].rate, rows[f"{phase}-direct"].rate
        if through_rate and direct_rate:
            rows[phase].notes.append(
                f"{through_rate / direct_rate:.0%} of the direct {phase}; latency per artifact, "
                "CPU ms per MiB"
            )
    if backend == "azure":
        rows["download"].notes.append(
            "the coordinator only answers getArtifact: the bytes come in one GET of Azurite's "
            f"SAS URL, while the direct row is azure-storage-blob's {BLOCK_SIZE // MIB} MiB ranged "
            "GETs one after the other (so it may be the slower)"
        )
    else:
        rows["download-direct"].notes.append(
            "the files were just written: both downloads read them from the page cache"
        )
    return [rows[phase] for phase in PHASES]


# --- the artifact-1gib row --------------------------------------------------------------------


class _CreateStream:
    """createTask calls started at ``rate`` a second, each awaited on its own.

    :param tasks: the client.
    :param settings: the row's (its priority, its ``create_rate``).
    """

    def __init__(self, tasks: TaskClient, settings: Settings) -> None:
        self._tasks = tasks
        self._settings = settings
        self._worker_type = f"wt-{uuid.uuid4().hex[:8]}"
        self._group = new_task_id()

    async def run(
        self, *, until: Callable[[], bool], deadline: float
    ) -> tuple[list[tuple[float, float]], int]:
        """Start calls until ``until()`` or monotonic ``deadline``, then await those under way.

        :returns: (epoch seconds sent, seconds to the answer) of each call answered, and how
            many failed.
        """
        answered: list[tuple[float, float]] = []
        failures = 0
        running: set[asyncio.Task[None]] = set()

        async def one() -> None:
            nonlocal failures
            [(task_id, definition)] = self._tasks.new_tasks(
                1,
                worker_type=self._worker_type,
                task_group_id=self._group,
                priority=self._settings.priority,
            )
            sent, started = time.time(), time.monotonic()
            try:
                await self._tasks.create(task_id, definition)
            except (aiohttp.ClientError, TimeoutError, RuntimeError):
                failures += 1
                return
            answered.append((sent, time.monotonic() - started))

        interval = 1 / self._settings.create_rate
        next_at = time.monotonic()
        while not until() and time.monotonic() < deadline:
            call = asyncio.create_task(one())
            running.add(call)
            call.add_done_callback(running.discard)
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        await asyncio.gather(*running)
        return answered, failures


async def _peak_rss(process: psutil.Process, until: Callable[[], bool]) -> int:
    """The largest RSS of ``process`` read every :data:`RSS_INTERVAL_S` until ``until()``."""
    peak = 0
    while not until():
        with contextlib.suppress(psutil.Error):
            peak = max(peak, process.memory_info().rss)
        await asyncio.sleep(RSS_INTERVAL_S)
    return peak


def _create_row(
    row: Row, answered: list[tuple[float, float]], window: float, failures: int
) -> None:
    row.count = len(answered)
    row.window = window
    row.rate = row.count / window if window else None
    latency_fields(row, [seconds for _, seconds in answered])
    if failures:
        row.notes.append(f"{failures} createTask calls failed")


async def run_big(settings: Settings) -> list[Row]:
    """The rows of ``artifact-1gib``."""
    rate = f"{settings.create_rate:g}/s started"
    upload = Row(
        key="artifact-1gib",
        title=f"one {settings.big_artifact_mib} MiB artifact PUT through the coordinator "
        "(directory backend), its RSS sampled",
        unit="MiB/s",
    )
    loaded = Row(
        key="artifact-1gib-createtask",
        title=f"createTask ({rate}, SQLite, no Azure) during that upload",
        unit="tasks/s",
        notes=["CPU: in the artifact-1gib row, whose window this is"],
    )
    quiet = Row(
        key="artifact-1gib-createtask-quiet",
        title=f"createTask ({rate}, SQLite, no Azure) as long again, no upload",
        unit="tasks/s",
    )
    workdir = settings.workdir / upload.key
    async with (
        coordinator(
            settings,
            store="sqlite",
            workdir=workdir,
            azure_connection_string=None,
            profile=_profile(settings, workdir),
        ) as running,
        aiohttp.ClientSession() as session,
    ):
        tasks = TaskClient(session, running)
        task_id = await _running_task(tasks, settings)
        creates = _CreateStream(tasks, settings)
        # Warm the coordinator up: createTask for the warm-up, a small upload by the same way.
        await creates.run(until=lambda: False, deadline=time.monotonic() + settings.warmup)
        await _ThroughCoordinator(session, tasks, running.api, task_id, os.urandom(MIB)).upload(0)
        put_url = await _put_url(tasks, task_id, _name(1), settings.big_artifact_mib * MIB)
        timing, answered, failures = await _upload_big(settings, running, creates, put_url, upload)
        _create_row(
            loaded,
            [(sent, s) for sent, s in answered if timing["started"] <= sent < timing["ended"]],
            timing["ended"] - timing["started"],
            failures,
        )
        meter = CpuMeter({"coordinator": pids(running.process), "harness": own_process})
        meter.start()
        begin = time.monotonic()
        answered, failures = await creates.run(until=lambda: False, deadline=begin + upload.window)
        meter.stop()
        _create_row(quiet, answered, time.monotonic() - begin, failures)
        meter.fill(quiet)
    if loaded.p99_ms and quiet.p99_ms:
        loaded.notes.append(
            f"createTask p99 {loaded.p99_ms:.1f} ms during the upload, {quiet.p99_ms:.1f} ms "
            f"without: {loaded.p99_ms / quiet.p99_ms:.1f} times (target < 2)"
        )
    return [upload, loaded, quiet]


async def _upload_big(
    settings: Settings,
    running: Coordinator,
    creates: _CreateStream,
    put_url: str,
    row: Row,
) -> tuple[dict[str, float], list[tuple[float, float]], int]:
    """Stream ``big_artifact_mib`` MiB to ``put_url`` from a child process while sampling the
    coordinator's RSS and running ``creates``; fill ``row`` (rate, CPU, RSS).

    :returns: the uploader's timing (``started``, ``ended``: epoch seconds; ``seconds``), and
        what :meth:`_CreateStream.run` returned.
    """
    workdir = settings.workdir / row.key
    if running.process is None:
        raise RuntimeError("the coordinator process is gone")
    served = psutil.Process(running.process.pid)
    out = workdir / "uploader.json"
    before = served.memory_info().rss
    uploader = await spawn(
        [
            *(PYTHON, "-m", "benchlib.artifacts", f"--put-url={put_url}"),
            *(f"--length={settings.big_artifact_mib * MIB}", f"--content-type={CONTENT_TYPE}"),
            f"--out={out}",
        ],
        env=child_env(),
        log=workdir / "uploader.log",
    )
    # The harness reaps the uploader before the window ends: its CPU time lands in the
    # harness's children times, which own_process counts.
    meter = CpuMeter({"coordinator": pids(running.process), "uploader+harness": own_process})
    meter.start()
    begin = time.monotonic()
    deadline = begin + 30 + settings.big_artifact_mib / SLOWEST_UPLOAD_MIB_S
    ended = asyncio.create_task(uploader.wait())
    try:
        peak, (answered, failures) = await asyncio.gather(
            _peak_rss(served, lambda: ended.done() or time.monotonic() >= deadline),
            creates.run(until=ended.done, deadline=deadline),
        )
    finally:
        await end_processes([uploader])
    meter.stop()
    if uploader.returncode != 0:
        raise RuntimeError(
            f"the uploader exited {uploader.returncode} after {time.monotonic() - begin:.0f} s "
            f"(see {workdir / 'uploader.log'})"
        )
    after = served.memory_info().rss
    timing: dict[str, float] = json.loads(out.read_text())
    row.count = settings.big_artifact_mib
    row.window = timing["seconds"]
    row.rate = row.count / row.window
    meter.fill(row)
    row.figures = {
        "rss_before_mib": before / MIB,
        "rss_peak_mib": peak / MIB,
        "rss_growth_mib": (peak - before) / MIB,
        "rss_after_mib": after / MIB,
    }
    row.notes.append(
        f"coordinator RSS {before / MIB:.1f} MiB before the upload, {peak / MIB:.1f} MiB at "
        f"its peak during it (growth {(peak - before) / MIB:.1f} MiB; target < 50), "
        f"{after / MIB:.1f} MiB after; the upload took {timing['seconds']:.1f} s; CPU ms per "
        "MiB, the uploader's start-up included"
    )
    return timing, answered, failures


# --- the uploader process ---------------------------------------------------------------------


async def _stream_upload(url: str, content_type: str, length: int) -> dict[str, float]:
    """PUT ``length`` bytes (one random MiB over and over) to ``url``; when it started and
    ended (epoch seconds) and how long it took."""
    block = os.urandom(MIB)

    async def body() -> AsyncIterator[bytes]:
        left = length
        while left > 0:
            chunk = block if left >= MIB else block[:left]
            left -= len(chunk)
            yield chunk

    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        started, begin = time.time(), time.monotonic()
        async with session.put(
            URL(url, encoded=True),
            data=body(),
            headers={"Content-Type": content_type, "Content-Length": str(length)},
        ) as response:
            text = await response.text()
            if response.status != 200:
                raise SystemExit(f"the upload answered {response.status}: {text[:300]}")
        return {"started": started, "ended": time.time(), "seconds": time.monotonic() - begin}


def upload_main(argv: list[str] | None = None) -> int:
    """``python -m benchlib.artifacts``: the ``artifact-1gib`` row's uploader."""
    parser = argparse.ArgumentParser(
        prog="python -m benchlib.artifacts",
        description="PUT LENGTH bytes to a putUrl; write when it started and ended as JSON",
    )
    parser.add_argument("--put-url", required=True)
    parser.add_argument("--content-type", required=True)
    parser.add_argument("--length", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    timing = asyncio.run(_stream_upload(args.put_url, args.content_type, args.length))
    args.out.write_text(json.dumps(timing))
    return 0


if __name__ == "__main__":
    sys.exit(upload_main())
