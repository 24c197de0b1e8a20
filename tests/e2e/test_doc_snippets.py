"""Every fenced ``python``, ``sh`` and ``bash`` block of README.md and docs/*.md runs as pasted
against a real coordinator (in this process, SQLite, store dispatch, authentication on with
the ``root`` client that ``./scripts/dev`` prints the exports of).

Each block runs on its own, in a fresh working directory holding a ``.venv`` link to this
checkout's virtualenv, with ``TASKCLUSTER_ROOT_URL``, ``TASKCLUSTER_CLIENT_ID`` and
``TASKCLUSTER_ACCESS_TOKEN`` exported as the README's export lines give them and
``127.0.0.1:8080`` (``./scripts/dev``'s address) replaced by the test coordinator's. A
``python`` block runs as a script, a ``sh`` or ``bash`` block under ``bash -e -o pipefail``;
either must exit 0.

A block that cannot run so says how it is to be treated in an HTML comment on the line
before its fence (invisible on the rendered page):

``<!-- snippet: skip (why) -->``
    not run, reported as skipped with the reason (a long bench, ``./scripts/dev`` itself).
``<!-- snippet: file PATH -->``
    the contents of the file PATH that the prose asks the reader to save: written into the
    working directory of every later block of its document; its own test compiles it.
``<!-- snippet: worker PROVISIONER/WORKER_TYPE -->``
    a worker that runs until stopped: the test creates a task on that task queue, runs the
    block until the task is completed, then stops it with SIGTERM, after which it must exit 0.
``<!-- snippet: worker, serving the next block -->``
    the same, except that the work is the next block's (which has no test of its own): that
    block runs while the worker does and must exit 0.
``<!-- snippet: auth off -->``
    the block needs a coordinator with authentication off (the prose says so).
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import slugid

from devharness.processes import REPO, end_processes
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.clients import Queue, write_clients
from tests.fixtures.commands import run_to_end, taskcluster_env
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LANGUAGES = {"python", "sh", "bash"}
DEV_ADDRESS = "127.0.0.1:8080"
"""Where ``./scripts/dev`` serves, as the documents spell it."""
RUN_TIMEOUT_S = 60.0
"""How long one block (or a worker's task) may take."""

MARKER = re.compile(r"^<!--\s*snippet:\s*(?P<marker>.*?)\s*-->$")
SKIP = re.compile(r"^skip \((?P<reason>.+)\)$")
FILE = re.compile(r"^file (?P<path>\S+)$")
WORKER = re.compile(r"^worker (?P<provisioner>[^/\s]+)/(?P<worker_type>\S+)$")
SERVING_NEXT = "worker, serving the next block"
AUTH_OFF = "auth off"


@dataclass(frozen=True, kw_only=True)
class Snippet:
    """One fenced block, where it stands and how its marker says to treat it."""

    document: Path
    line: int
    language: str
    code: str
    marker: str

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"


def snippets(document: Path) -> Iterator[Snippet]:
    """The ``python``, ``sh`` and ``bash`` blocks of ``document``, in order."""
    lines = document.read_text().splitlines()
    index = 0
    while index < len(lines):
        info = lines[index].removeprefix("```")
        if info == lines[index] or not info:
            index += 1
            continue
        end = lines.index("```", index + 1)
        before = next((line for line in reversed(lines[:index]) if line.strip()), "")
        found = MARKER.match(before.strip())
        if info.split()[0] in LANGUAGES:
            yield Snippet(
                document=document,
                line=index + 1,
                language=info.split()[0],
                code="\n".join(lines[index + 1 : end]) + "\n",
                marker=found["marker"] if found else "",
            )
        index = end + 1


@dataclass(frozen=True, kw_only=True)
class Case:
    """What one test runs: a block, the files its document saved before it, and the block a
    worker serves (``worker, serving the next block``)."""

    snippet: Snippet
    files: tuple[Snippet, ...]
    served: Snippet | None


def cases() -> Iterator[pytest.ParameterSet]:
    for document in DOCUMENTS:
        blocks = list(snippets(document))
        served = {blocks[i + 1].line for i, b in enumerate(blocks[:-1]) if b.marker == SERVING_NEXT}
        for i, block in enumerate(blocks):
            if block.line in served:
                continue
            following = blocks[i + 1] if block.marker == SERVING_NEXT else None
            files = tuple(b for b in blocks[:i] if FILE.match(b.marker))
            yield pytest.param(Case(snippet=block, files=files, served=following), id=block.name)


@dataclass(frozen=True, kw_only=True)
class Shell:
    """Where and with what environment a case's blocks run."""

    cwd: Path
    env: dict[str, str]
    coordinator: RunningCoordinator
    queue: Queue
    """The official client with the root client's credentials, the test's own calls."""

    def command(self, snippet: Snippet) -> list[str]:
        code = snippet.code.replace(DEV_ADDRESS, self.coordinator.url.removeprefix("http://"))
        if snippet.language == "python":
            return [str(self.cwd / ".venv" / "bin" / "python"), "-c", code]
        return ["bash", "-e", "-o", "pipefail", "-c", code]

    async def run(self, snippet: Snippet) -> None:
        finished = await run_to_end(
            self.command(snippet), cwd=self.cwd, env=self.env, timeout_s=RUN_TIMEOUT_S
        )
        assert finished.status == 0, f"{snippet.name} exited {finished.status}:\n{finished.output}"


async def shell_for(case: Case, start_coordinator: StartCoordinator, tmp_path: Path) -> Shell:
    """A coordinator for ``case``, and a working directory with the files its document saved."""
    clients_file = tmp_path / "clients.json"
    root = write_clients(clients_file, {})["root"]
    coordinator = await start_coordinator(
        auth_enabled=case.snippet.marker != AUTH_OFF, clients_file=clients_file
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    venv = Path(sys.executable).parent.parent
    (cwd / ".venv").symlink_to(venv)
    for file in case.files:
        match = FILE.match(file.marker)
        assert match is not None
        path = cwd / match["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(file.code)
    env = taskcluster_env(coordinator.url, root)
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    # The reader's directory first (the files it saved), then this checkout (examples/).
    env["PYTHONPATH"] = f"{cwd}:{REPO}"
    env["COORDINATOR_DATA_DIR"] = str(tmp_path / "data")
    queue = Queue("aio", coordinator.url, root)
    return Shell(cwd=cwd, env=env, coordinator=coordinator, queue=queue)


async def run_worker(shell: Shell, case: Case, worker_queue: tuple[str, str] | None) -> None:
    """Run ``case``'s worker block until its work is done: the task it is given completed, or
    the block it serves exited 0; then SIGTERM, and it must exit 0."""
    task_id = None
    if worker_queue is not None:
        provisioner_id, worker_type = worker_queue
        task_id = slugid.nice()
        definition = task_definition(provisionerId=provisioner_id, workerType=worker_type)
        await shell.queue.createTask(task_id, definition)
    log = shell.cwd / "worker.log"
    with log.open("wb") as out:
        worker = await asyncio.create_subprocess_exec(
            *shell.command(case.snippet),
            cwd=shell.cwd,
            env=shell.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:
        if case.served is not None:
            await shell.run(case.served)
        if task_id is not None:

            async def completed() -> bool:
                assert worker.returncode is None, log.read_text()
                answer = await shell.queue.status(task_id)
                return bool(answer["status"]["state"] == "completed")

            await wait_until(completed, within=RUN_TIMEOUT_S, what=f"{task_id} completed")
        assert worker.returncode is None, f"the worker exited early:\n{log.read_text()}"
    finally:
        await end_processes([worker], signum=signal.SIGTERM)
    assert worker.returncode == 0, log.read_text()


@pytest.mark.parametrize("case", list(cases()))
async def test_the_snippet_runs_as_pasted(
    case: Case, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    marker = case.snippet.marker
    if skipped := SKIP.match(marker):
        pytest.skip(skipped["reason"])
    if FILE.match(marker):
        if case.snippet.language == "python":
            compile(case.snippet.code, case.snippet.name, "exec")
        return
    worker = WORKER.match(marker)
    assert marker in ("", AUTH_OFF, SERVING_NEXT) or worker, f"unknown marker {marker!r}"
    shell = await shell_for(case, start_coordinator, tmp_path)
    if worker or marker == SERVING_NEXT:
        queue = (worker["provisioner"], worker["worker_type"]) if worker else None
        await run_worker(shell, case, queue)
    else:
        await shell.run(case.snippet)
