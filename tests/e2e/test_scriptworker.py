"""Artifacts proved by software nobody here wrote (issue 25): Mozilla's ``taskgraph decision``
(taskcluster-taskgraph 24.5.1) submits a two-task graph to a real coordinator process with
authentication on, and a real ``scriptworker`` (63.6.1) process claims and runs both tasks,
uploading their artifacts through createArtifact and the putUrl, the second task reading the
first one's artifact on the way; then the official Python client lists and reads them back,
anonymously for ``public/`` names. Both run from their own virtualenv ``.venv-tcw``
(``./scripts/test`` makes it).

The decision task is the test's: created with the scopes ``taskgraph`` needs (schedulerId
``test-level-1``, as taskgraph's tasks have), claimed, ``taskgraph decision`` run with the
claim's temporary credentials as a decision task's worker runs it, its ``task-graph.json``
uploaded as ``public/task-graph.json`` and the run reported completed, which lets the graph's
tasks be scheduled.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devharness.azurite import AzuriteProcess
from devharness.processes import end_processes, log_tail, spawn
from devharness.waiting import WaitTimeout, wait_until
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.clients import Credentials, Queue, write_clients
from tests.fixtures.commands import run_to_end, taskcluster_env
from tests.fixtures.coordinator import CoordinatorProcess
from tests.fixtures.taskgraph import (
    PROCESS_TIMEOUT_S,
    SCHEDULER,
    TCW_BIN,
    WORKER_GROUP,
    decision_task,
    taskgraph_checkout,
)

TASK_SCRIPT = Path(__file__).with_name("scriptworker_task.py")

PROVISIONER = "local-prov"
WORKER_TYPE = "script"
WORKER_ID = "sw-1"

DECISION_SCOPES = [
    f"queue:create-task:low:{PROVISIONER}/{WORKER_TYPE}",
    f"queue:scheduler-id:{SCHEDULER}",
    "queue:create-task:project:none",
    "queue:route:checks",
]
"""What the graph's createTask calls need: taskgraph's ``task-priority: low``, its schedulerId,
the default project, and the ``checks`` route it adds to every task of a git repository."""

SCRIPTED_ARTIFACTS = {
    "public/chain-of-trust.json",
    "public/hello.txt",
    "public/logs/live_backing.log",
}
"""What scriptworker uploads for each task: the task script's file, its log and the chain of
trust document (written even though it is neither signed nor verified here)."""

HTTP_TIMEOUT = aiohttp.ClientTimeout(total=30)

pytestmark = pytest.mark.skipif(
    not (TCW_BIN / "scriptworker").exists(),
    reason=f"{TCW_BIN} is missing: ./scripts/test installs scriptworker and taskgraph into it",
)

TASKGRAPH_FILES = {
    ".taskcluster.yml": "# any content: taskgraph hashes it into actions.json\n",
    "taskcluster/config.yml": f"""\
trust-domain: test
task-priority: low
taskgraph:
  repositories:
    ci: {{name: Test}}
workers:
  aliases:
    script:
      provisioner: {PROVISIONER}
      implementation: succeed
      os: linux
      worker-type: {WORKER_TYPE}
""",
    "taskcluster/kinds/hello/kind.yml": """\
loader: taskgraph.loader.transform:loader
transforms: [taskgraph.transforms.task:transforms]
tasks:
  first:
    description: says hello
    worker-type: script
    worker: {implementation: succeed}
  second:
    description: says hello with what the first task said
    worker-type: script
    worker: {implementation: succeed}
    dependencies: {first: hello-first}
""",
}
"""A repository with a minimal ``taskcluster/`` configuration: two tasks of kind ``hello``
(labels ``hello-first`` and ``hello-second``, the second depending on the first) for
scriptworker's task queue; the ``succeed`` payload builder gives them an empty payload."""


@dataclass(kw_only=True)
class Fetched:
    """One artifact's bytes as a client sees them (decoded), and how the store sent them."""

    body: bytes
    content_type: str | None
    content_encoding: str | None


async def fetch(http: aiohttp.ClientSession, answer: Mapping[str, Any]) -> Fetched:
    """Follow a getArtifact/getLatestArtifact answer (the 303's JSON, as the official client
    returns it) to the bytes; aiohttp decodes a gzip Content-Encoding as any client does."""
    assert answer["storageType"] == "s3", answer
    async with http.get(answer["url"]) as response:
        assert response.status == 200, (answer["url"], response.status, await response.text())
        return Fetched(
            body=await response.read(),
            content_type=response.headers.get("Content-Type"),
            content_encoding=response.headers.get("Content-Encoding"),
        )


def scriptworker_config(directory: Path, root_url: str, credentials: Credentials) -> Path:
    """scriptworker's configuration (JSON, which its YAML loader reads) for this coordinator:
    no chain of trust, a 1 s poll, and :data:`TASK_SCRIPT` as the task script."""
    work_dir, artifact_dir = directory / "work", directory / "artifacts"
    config = {
        "taskcluster_root_url": root_url,
        "provisioner_id": PROVISIONER,
        "worker_type": WORKER_TYPE,
        "worker_group": WORKER_GROUP,
        "worker_id": WORKER_ID,
        "credentials": dict(credentials),
        "work_dir": str(work_dir),
        "artifact_dir": str(artifact_dir),
        "task_log_dir": str(artifact_dir / "public" / "logs"),
        "log_dir": str(directory / "log"),
        "ed25519_private_key_path": str(directory / "unused-ed25519-key"),
        "task_script": [sys.executable, str(TASK_SCRIPT), str(work_dir), str(artifact_dir)],
        "sign_chain_of_trust": False,
        "verify_chain_of_trust": False,
        "verify_cot_signature": False,
        "poll_interval": 1,
        "reclaim_interval": 300,
        "artifact_upload_timeout": 60,
        "task_max_timeout": 120,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "scriptworker.yaml"
    path.write_text(json.dumps(config, indent=2))
    return path


@dataclass(kw_only=True)
class Clients:
    """The official Python client as each party of the test: ``root`` (everything),
    ``reader`` (``queue:list-artifacts:*`` only) and ``anonymous`` (no credentials)."""

    root: Queue
    reader: Queue
    anonymous: Queue


async def scripted_artifacts(clients: Clients, http: aiohttp.ClientSession, task_id: str) -> str:
    """Check what scriptworker uploaded for ``task_id``'s run 0: :data:`SCRIPTED_ARTIFACTS`
    listed (per run and latest) with the task's expiry, each read anonymously through
    getArtifact and getLatestArtifact alike, gzip-encoded as scriptworker sent it, the log
    holding the task script's lines. What ``public/hello.txt`` says."""
    task = await clients.root.task(task_id)
    listed = (await clients.reader.listArtifacts(task_id, 0))["artifacts"]
    assert {a["name"] for a in listed} == SCRIPTED_ARTIFACTS, listed
    for artifact in listed:
        assert artifact["storageType"] == "s3", artifact
        assert artifact["expires"] == task["expires"], (artifact, task["expires"])
    assert (await clients.reader.listLatestArtifacts(task_id))["artifacts"] == listed

    read: dict[str, Fetched] = {}
    for name in SCRIPTED_ARTIFACTS:
        read[name] = await fetch(http, await clients.anonymous.getArtifact(task_id, 0, name))
        latest = await fetch(http, await clients.anonymous.getLatestArtifact(task_id, name))
        assert read[name].body == latest.body, name
        # scriptworker gzips text and JSON in place and says so on the PUT; the store
        # replays the header, so clients see the original bytes.
        assert read[name].content_encoding == "gzip", (name, read[name])

    hello = read["public/hello.txt"]
    assert hello.content_type == "text/plain", hello
    said = hello.body.decode()
    assert said.startswith(f"hello from {task_id}/0\n"), said
    log = read["public/logs/live_backing.log"].body.decode()
    assert f"scriptworker_task: running {task_id}/0" in log, log
    assert "scriptworker_task: wrote public/hello.txt" in log, log
    assert "exit code: 0" in log, log
    assert json.loads(read["public/chain-of-trust.json"].body)["taskId"] == task_id
    return said


@pytest.fixture
async def scriptworker_processes() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """The scriptworker processes a test starts (append them); each is sent SIGTERM at the end
    and SIGKILLed if it has not exited 20 s later."""
    processes: list[asyncio.subprocess.Process] = []
    yield processes
    await end_processes(processes, signum=signal.SIGTERM, wait=20.0)


async def test_taskgraph_decision_and_scriptworker_through_the_artifact_api(
    coordinator_process: Callable[..., CoordinatorProcess],
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    scriptworker_processes: list[asyncio.subprocess.Process],
    tmp_path: Path,
) -> None:
    clients_file = tmp_path / "clients.json"
    credentials = write_clients(
        clients_file,
        {
            "scriptworker": [
                f"queue:claim-work:{PROVISIONER}/{WORKER_TYPE}",
                f"queue:worker-id:{WORKER_GROUP}/{WORKER_ID}",
            ],
            "reader": ["queue:list-artifacts:*"],
        },
    )
    process = coordinator_process(
        auth_enabled=True,
        clients_file=clients_file,
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
    )
    root_url = (await process.start()).url
    clients = Clients(
        root=Queue("aio", root_url, credentials["root"]),
        reader=Queue("aio", root_url, credentials["reader"]),
        anonymous=Queue("aio", root_url),
    )

    async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as http:
        checkout = tmp_path / "checkout"
        taskgraph_checkout(checkout, TASKGRAPH_FILES)
        decision = await decision_task(
            clients.root,
            http,
            root_url,
            checkout,
            provisioner_id=PROVISIONER,
            scopes=DECISION_SCOPES,
        )
        decision_id, labels, task_graph = decision.task_id, decision.labels, decision.task_graph
        assert set(labels) == {"hello-first", "hello-second"}, labels
        first_id, second_id = labels["hello-first"], labels["hello-second"]
        first = await clients.root.task(first_id)
        second = await clients.root.task(second_id)
        assert (first["provisionerId"], first["workerType"]) == (PROVISIONER, WORKER_TYPE)
        assert (first["schedulerId"], first["taskGroupId"]) == (SCHEDULER, decision_id)
        # Only a task with no dependency in the graph waits on the decision task.
        assert (first["dependencies"], second["dependencies"]) == ([decision_id], [first_id])

        directory = tmp_path / "scriptworker"
        config = scriptworker_config(directory, root_url, credentials["scriptworker"])
        log = directory / "scriptworker.log"
        scriptworker = await spawn(
            [str(TCW_BIN / "scriptworker"), str(config)],
            env=taskcluster_env(root_url, None),
            log=log,
        )
        scriptworker_processes.append(scriptworker)

        async def both_resolved() -> bool:
            if scriptworker.returncode is not None:
                raise AssertionError(f"scriptworker exited:\n{log_tail(log)}")
            states = [
                (await clients.root.status(t))["status"]["state"] for t in (first_id, second_id)
            ]
            return all(state not in ("unscheduled", "pending", "running") for state in states)

        try:
            await wait_until(both_resolved, within=90, interval=0.5, what="both tasks resolved")
        except WaitTimeout as error:
            raise AssertionError(f"{error}\n{log_tail(log, 6000)}") from None
        for task_id in (first_id, second_id):
            [run] = (await clients.root.status(task_id))["status"]["runs"]
            assert (run["state"], run["workerGroup"], run["workerId"]) == (
                "completed",
                WORKER_GROUP,
                WORKER_ID,
            ), (run, log_tail(log, 6000))

        said = {
            task_id: await scripted_artifacts(clients, http, task_id) for task_id in labels.values()
        }
        # The second task read the first one's artifact while it ran.
        assert said[second_id] == (
            f"hello from {second_id}/0\nupstream {first_id}: {said[first_id].strip()}\n"
        ), said[second_id]
        # The bytes behind the URL are the gzip scriptworker uploaded.
        answer = await clients.anonymous.getArtifact(first_id, 0, "public/hello.txt")
        async with http.get(answer["url"], auto_decompress=False) as response:
            assert gzip.decompress(await response.read()).decode() == said[first_id]

    # taskgraph reads the decision task's artifact as it reads any (getLatestArtifact, then
    # the URL), anonymously since the name is public/.
    read = await run_to_end(
        [
            str(TCW_BIN / "python"),
            "-c",
            "import json, sys\n"
            "from taskgraph.util.taskcluster import get_artifact\n"
            "json.dump(get_artifact(sys.argv[1], 'public/task-graph.json'), sys.stdout)",
            decision_id,
        ],
        cwd=tmp_path,
        env=taskcluster_env(root_url, None),
        timeout_s=PROCESS_TIMEOUT_S,
    )
    assert read.status == 0, read.output
    assert json.loads(read.stdout) == json.loads(task_graph)

    scriptworker.send_signal(signal.SIGTERM)
    try:
        assert await asyncio.wait_for(scriptworker.wait(), 20) == 0, log_tail(log)
    except TimeoutError:
        raise AssertionError(f"scriptworker ignored SIGTERM:\n{log_tail(log)}") from None
    # No upload was retried, no claim, reclaim or report failed.
    worker_log = log.read_text(errors="replace")
    for trouble in ("Traceback", "SCRIPTWORKER_UNEXPECTED_EXCEPTION", "Bad status", "WARNING"):
        assert trouble not in worker_log, worker_log[-6000:]
    coordinator_log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in coordinator_log, coordinator_log[-5000:]
