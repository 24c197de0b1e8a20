"""The handler that ``queue-worker`` processes run in tests/e2e/test_worker_artifacts.py, and
what it is expected to leave behind (:func:`lines_of`, :func:`hello_of`, :func:`file_of`),
so the test reads back exactly what the handler made.

The payload says what to do::

    {"do": "artifacts", "barrier": <directory>, "meet": <runs>}
    {"do": "raise"}

``artifacts`` logs the first half of :func:`lines_of`, then waits (bounded) until ``meet``
runs have reached the same point (each marks it with a file named by its taskId in
``barrier``), so concurrent runs of one worker interleave their records; then it logs the
second half and makes :data:`ARTIFACTS`: the bytes of :func:`hello_of`, a file of
:func:`file_of` streamed in chunks, a link to the first and an error artifact. ``raise``
logs one line, then raises :class:`RuntimeError`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import tempfile
from pathlib import Path

from devharness.waiting import wait_until
from worker_sdk import TaskRun

log = logging.getLogger(__name__)

LINES = 6
"""Lines :func:`lines_of` gives a run; half before the barrier, half after."""

HELLO = "public/hello.txt"
FILE = "public/data.bin"
LINK = "public/latest.txt"
MISSING = "public/missing.log"
ARTIFACTS = {HELLO: "s3", FILE: "s3", LINK: "link", MISSING: "error"}
"""What ``artifacts`` makes: name -> storageType."""

FILE_SIZE = 600 * 1024
"""More than two of the SDK's upload chunks (256 KiB)."""

BARRIER_S = 30.0
"""How long a run waits for its peers at the barrier."""


def lines_of(task_id: str, pid: int) -> list[str]:
    """The lines the handler logs for ``task_id`` in process ``pid``, in order."""
    return [f"line {n} of {task_id} in process {pid}" for n in range(1, LINES + 1)]


def hello_of(task_id: str) -> bytes:
    return f"hello from {task_id}\n".encode()


def file_of(task_id: str) -> bytes:
    """:data:`FILE_SIZE` bytes peculiar to ``task_id``."""
    seed = hashlib.sha256(task_id.encode()).digest()
    return (seed * (FILE_SIZE // len(seed) + 1))[:FILE_SIZE]


def missing_message(task_id: str) -> str:
    return f"{task_id} never wrote this log"


async def handle(run: TaskRun) -> None:
    payload = run.payload
    if payload["do"] == "raise":
        log.info("about to fail %s", run.task_id)
        raise RuntimeError(f"deliberate failure of {run.task_id}")
    lines = lines_of(run.task_id, os.getpid())
    for line in lines[: LINES // 2]:
        log.info("%s", line)
    await _meet(Path(payload["barrier"]), run.task_id, int(payload["meet"]))
    for line in lines[LINES // 2 :]:
        log.info("%s", line)

    await run.upload_artifact(HELLO, hello_of(run.task_id))
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "data.bin"
        await asyncio.to_thread(path.write_bytes, file_of(run.task_id))
        await run.upload_artifact(FILE, path)
    await run.create_link_artifact(LINK, HELLO)
    await run.create_error_artifact(MISSING, "file-missing-on-worker", missing_message(run.task_id))


async def _meet(barrier: Path, task_id: str, runs: int) -> None:
    """Mark ``task_id`` at the barrier and wait until ``runs`` runs have."""
    await asyncio.to_thread(_mark, barrier, task_id)
    await wait_until(
        lambda: len(list(barrier.iterdir())) >= runs,
        within=BARRIER_S,
        what=f"{runs} runs at {barrier}",
    )


def _mark(barrier: Path, task_id: str) -> None:
    barrier.mkdir(parents=True, exist_ok=True)
    (barrier / task_id).touch()
