"""The index service proved by software nobody here wrote: Mozilla's ``taskgraph``
(taskcluster-taskgraph 24.5.1, from ``.venv-tcw``) finds a repository's cached tasks in the
coordinator's index and optimizes them away, as it does on a real Taskcluster deployment.

The repository (a git checkout the test makes) is configured as taskgraph's own and
mozilla-central's are: a ``docker-image`` kind (``taskgraph.transforms.docker_image``, the image
defined by ``taskcluster/docker/builder/Dockerfile``), a ``toolchain`` kind (``run.using:
toolchain-script``) whose task runs in that image, both through
``taskgraph.transforms.cached_tasks``, which gives each task its
``index.test.cache.level-1.<type>.<name>.hash.<digest>`` routes and an ``index-search``
optimization over the same paths at levels 3 to 1, and a ``build`` kind whose task runs in the
image and fetches the toolchain's artifact (it is not cached: it runs on every push).

1. A first decision task runs ``taskgraph decision`` against a real coordinator process with
   authentication on: it asks the index for the cached tasks (findTasksAtIndex) and, finding
   none, submits all three. Nothing is indexed while they are pending (findTask is a 404). The
   test, as the workers of the ``images`` and ``b-linux`` pools, claims the image task and then
   the toolchain task, uploads their artifacts with the claims' credentials and reports them
   completed; the coordinator indexes each ``index.*`` route of theirs as it completes them,
   so the official ``Index`` client finds them as soon as reportCompleted has answered
   (findTask), with the rank taskgraph put in ``task.extra.index`` and the defaults upstream's
   indexer gives the rest (``data`` ``{}``, the task's ``expires``).
2. A second decision task, for the same revision (a clone of the first checkout, so the
   digests match), runs ``taskgraph decision`` again: this time the index answers, and
   taskgraph replaces the image and the toolchain with the first run's tasks. Its
   ``label-to-taskid.json`` maps their labels to the first run's taskIds, the graph it
   submits holds only the build task, which depends on the first run's image and toolchain
   (its payload names them) and is pending once its decision task completes, since they are
   done; nothing else was created in its task group.
3. taskgraph's single lookup (``find_task_id``: findTask) finds both tasks at their paths.

Reading the index takes ``index:find-task:<path>`` as in Taskcluster; every caller holds it
here through the clients file's ``anonymousScopes``, as a public deployment's ``anonymous`` role
grants it, which is how the decision task (holding its task's scopes only) searches the index.

A second test reads a toolchain's artifact through the index with taskgraph's
``get_artifact_from_index`` (findArtifactFromTask, then the ``Location`` it redirects to). It
is expected to fail (strictly) while the coordinator's findArtifactFromTask answers its 303
with a JSON body, which upstream's does not: see its marker.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import slugid

from devharness.azurite import AzuriteProcess
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.clients import Index, Queue, rejected, write_clients
from tests.fixtures.commands import run_to_end, taskcluster_env
from tests.fixtures.coordinator import CoordinatorProcess
from tests.fixtures.taskgraph import (
    PROCESS_TIMEOUT_S,
    SCHEDULER,
    TCW_BIN,
    WORKER_GROUP,
    Decision,
    decision_task,
    git,
    taskgraph_checkout,
    upload,
)

PROVISIONER = "local-prov"
IMAGES = f"{PROVISIONER}/images"
BUILDERS = f"{PROVISIONER}/b-linux"

IMAGE = "docker-image-builder"
TOOLCHAIN = "toolchain-hello"
BUILD = "build-app"
CACHED = (IMAGE, TOOLCHAIN)
"""The labels of the graph's tasks; the image and the toolchain are the cached ones."""

ARTIFACTS = {
    IMAGE: ("public/image.tar.zst", b"the builder image, as image_builder would zstd it\n"),
    TOOLCHAIN: ("public/build/hello.tar.zst", b"the hello toolchain, built in the image\n"),
}
"""What the test, as each cached task's worker, uploads: the artifact taskgraph's transforms
declare for it (``public/image.tar.zst``, the toolchain's ``public/build`` directory)."""

DECISION_SCOPES = [
    f"queue:create-task:low:{IMAGES}",
    f"queue:create-task:low:{BUILDERS}",
    f"queue:scheduler-id:{SCHEDULER}",
    "queue:create-task:project:none",
    "queue:route:checks",
    "queue:route:index.test.cache.level-1.*",
    "queue:route:tc-treeherder.v2.test.*",
    "docker-worker:cache:test-level-1-checkouts-*",
]
"""What the graph's createTask calls need, as a repository's level-1 role grants them: the two
worker pools at taskgraph's ``task-priority: low``, its schedulerId and the default project,
the routes taskgraph adds (``checks`` for a git repository, the treeherder route of the tasks
with a symbol, and the cached tasks' index routes at level 1), and the checkout cache that
``run-task`` tasks name in their scopes. Reading the index is :data:`ANONYMOUS_SCOPES`'."""

ANONYMOUS_SCOPES = ["queue:get-artifact:public/*", "index:find-task:*"]
"""What every caller holds (the clients file's ``anonymousScopes``), as a public Taskcluster
deployment's ``anonymous`` role grants it: reading ``public/`` artifacts and finding indexed
tasks (findTask and findTasksAtIndex need ``index:find-task:<path>``), which is how
taskgraph's decision task, holding only its task's scopes, searches the index."""

TASKGRAPH_FILES = {
    ".taskcluster.yml": "# any content: taskgraph hashes it into actions.json\n",
    "taskcluster/config.yml": f"""\
trust-domain: test
task-priority: low
treeherder:
  group-names:
    I: Docker image builds
    TL: Toolchain builds
taskgraph:
  repositories:
    ci: {{name: Test}}
workers:
  aliases:
    images:
      provisioner: {PROVISIONER}
      implementation: docker-worker
      os: linux
      worker-type: images
    b-linux:
      provisioner: {PROVISIONER}
      implementation: docker-worker
      os: linux
      worker-type: b-linux
""",
    "taskcluster/docker/builder/Dockerfile": """\
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends build-essential zstd
""",
    "taskcluster/scripts/toolchain/build-hello.sh": """\
#!/bin/bash
set -e
mkdir -p "$UPLOAD_DIR"
echo hello | zstd > "$UPLOAD_DIR/hello.tar.zst"
""",
    "taskcluster/kinds/docker-image/kind.yml": """\
loader: taskgraph.loader.transform:loader
transforms:
  - taskgraph.transforms.docker_image:transforms
  - taskgraph.transforms.cached_tasks:transforms
  - taskgraph.transforms.task:transforms
tasks:
  builder:
    symbol: I(builder)
""",
    "taskcluster/kinds/toolchain/kind.yml": """\
loader: taskgraph.loader.transform:loader
kind-dependencies: [docker-image]
transforms:
  - taskgraph.transforms.run:transforms
  - taskgraph.transforms.cached_tasks:transforms
  - taskgraph.transforms.task:transforms
task-defaults:
  worker-type: b-linux
  worker:
    docker-image: {in-tree: builder}
    max-run-time: 1800
    env: {}
tasks:
  hello:
    description: builds the hello toolchain
    treeherder: {symbol: TL(hello), platform: toolchains/opt, kind: build, tier: 1}
    run:
      using: toolchain-script
      script: build-hello.sh
      toolchain-artifact: public/build/hello.tar.zst
""",
    "taskcluster/kinds/build/kind.yml": """\
loader: taskgraph.loader.transform:loader
kind-dependencies: [docker-image, toolchain]
transforms:
  - taskgraph.transforms.run:transforms
  - taskgraph.transforms.task:transforms
tasks:
  app:
    description: builds the app with the hello toolchain
    worker-type: b-linux
    worker:
      docker-image: {in-tree: builder}
      max-run-time: 1800
    fetches:
      toolchain: [hello]
    run:
      using: run-task
      command: ls "$MOZ_FETCHES_DIR"
""",
}
"""The repository: labels :data:`IMAGE`, :data:`TOOLCHAIN` (depending on the image) and
:data:`BUILD` (depending on both)."""

HTTP_TIMEOUT = aiohttp.ClientTimeout(total=30)

pytestmark = pytest.mark.skipif(
    not (TCW_BIN / "taskgraph").exists(),
    reason=f"{TCW_BIN} is missing: ./scripts/test installs taskgraph into it",
)


def cache_namespace(task: Mapping[str, Any], level: int, leaf: str | None = None) -> str:
    """Where taskgraph indexes a cached task of the graph (``task-graph.json``'s entry) at
    ``level``: ``<trust-domain>.cache.level-<level>.<type>.<name>.hash.<digest>``, or with
    ``leaf`` (``latest``) instead of ``hash.<digest>``."""
    cached = task["attributes"]["cached_task"]
    tail = leaf or f"hash.{cached['digest']}"
    return f"test.cache.level-{level}.{cached['type']}.{cached['name']}.{tail}"


def graph_by_label(decision: Decision) -> dict[str, dict[str, Any]]:
    """The tasks of the graph a decision submitted (``task-graph.json``, keyed by taskId),
    keyed by label; each entry's taskId checked against its ``label-to-taskid.json``."""
    graph: dict[str, dict[str, Any]] = json.loads(decision.task_graph)
    by_label = {entry["label"]: entry for entry in graph.values()}
    assert len(by_label) == len(graph), graph.keys()
    for task_id, entry in graph.items():
        assert decision.labels[entry["label"]] == task_id, (entry["label"], decision.labels)
    return by_label


async def work_one(
    worker: Queue,
    http: aiohttp.ClientSession,
    root_url: str,
    pool: str,
    artifact: tuple[str, bytes],
) -> str:
    """What a worker of ``pool`` does with the one task it can claim: claimWork (polled until a
    task comes, as the coordinator schedules it once its dependencies are done), the artifact
    uploaded with the claim's credentials, reportCompleted. The task's id."""
    claims: list[dict[str, Any]] = []

    async def claimed() -> bool:
        answer = await worker.claimWork(
            pool, {"workerGroup": WORKER_GROUP, "workerId": "builder-1", "tasks": 1}
        )
        claims.extend(answer["tasks"])
        return bool(claims)

    await wait_until(claimed, within=60, interval=0.2, what=f"a task of {pool} to claim")
    [claim] = claims
    task_id: str = claim["status"]["taskId"]
    run = Queue("aio", root_url, claim["credentials"])
    name, data = artifact
    await upload(
        http,
        run,
        task_id=task_id,
        name=name,
        data=data,
        content_type="application/octet-stream",
        expires=claim["task"]["expires"],
    )
    await run.reportCompleted(task_id, claim["runId"])
    return task_id


@dataclass(frozen=True, kw_only=True)
class Started:
    """A coordinator process with authentication on, and the official clients the test uses:
    ``root``, ``worker`` (claims from both pools) and an anonymous ``index``."""

    process: CoordinatorProcess
    root_url: str
    root: Queue
    worker: Queue
    index: Index


async def start(
    coordinator_process: Callable[..., CoordinatorProcess],
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    tmp_path: Path,
) -> Started:
    """A coordinator process on Azurite, its clients file granting :data:`ANONYMOUS_SCOPES` to
    everybody and the claims of both pools to the ``builders`` client."""
    clients_file = tmp_path / "clients.json"
    credentials = write_clients(
        clients_file,
        {
            "builders": [
                f"queue:claim-work:{IMAGES}",
                f"queue:claim-work:{BUILDERS}",
                f"queue:worker-id:{WORKER_GROUP}/*",
            ],
        },
        anonymous_scopes=ANONYMOUS_SCOPES,
    )
    process = coordinator_process(
        auth_enabled=True,
        clients_file=clients_file,
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
    )
    root_url = (await process.start()).url
    return Started(
        process=process,
        root_url=root_url,
        root=Queue("aio", root_url, credentials["root"]),
        worker=Queue("aio", root_url, credentials["builders"]),
        index=Index("aio", root_url),
    )


async def run_taskgraph_python(tmp_path: Path, root_url: str, code: str, *args: str) -> Any:
    """Run ``code`` (which writes JSON to stdout) with taskgraph's Python, anonymously against
    ``root_url``, with ``args`` as ``sys.argv[1:]``; what it wrote."""
    read = await run_to_end(
        [str(TCW_BIN / "python"), "-c", code, *args],
        cwd=tmp_path,
        env=taskcluster_env(root_url, None),
        timeout_s=PROCESS_TIMEOUT_S,
    )
    assert read.status == 0, read.output
    return json.loads(read.stdout)


@pytest.mark.slow(seconds=10)
async def test_taskgraph_optimizes_away_the_tasks_the_index_holds(
    coordinator_process: Callable[..., CoordinatorProcess],
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    tmp_path: Path,
) -> None:
    started = await start(coordinator_process, azurite, azure_namespace, tmp_path)
    root_url, root, worker, index = started.root_url, started.root, started.worker, started.index

    push = tmp_path / "push"
    revision = taskgraph_checkout(push, TASKGRAPH_FILES)
    async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as http:
        # 1. The first decision finds nothing in the index and submits the whole graph.
        first = await decision_task(
            root, http, root_url, push, provisioner_id=PROVISIONER, scopes=DECISION_SCOPES
        )
        assert set(first.labels) == {IMAGE, TOOLCHAIN, BUILD}, first.labels
        first_graph = graph_by_label(first)
        assert set(first_graph) == {IMAGE, TOOLCHAIN, BUILD}, first_graph.keys()
        namespaces: dict[str, list[str]] = {}
        for label in CACHED:
            entry = first_graph[label]
            namespaces[label] = [cache_namespace(entry, 1), cache_namespace(entry, 1, "latest")]
            # taskgraph looks from the highest level down and indexes at the task's own.
            assert entry["optimization"] == {
                "index-search": [cache_namespace(entry, level) for level in (3, 2, 1)]
            }, entry["optimization"]
            for namespace in namespaces[label]:
                assert f"index.{namespace}" in entry["task"]["routes"], entry["task"]
                # Routes are indexed when the task completes, not when it is created.
                status, body = await rejected(index.findTask(namespace))
                assert (status, body["code"]) == (404, "ResourceNotFound"), (status, body)
        assert first_graph[BUILD]["optimization"] is None, first_graph[BUILD]

        # The workers run the image, then the toolchain (which waits on the image); the
        # build task, waiting on both, is left pending.
        done = {
            IMAGE: await work_one(worker, http, root_url, IMAGES, ARTIFACTS[IMAGE]),
            TOOLCHAIN: await work_one(worker, http, root_url, BUILDERS, ARTIFACTS[TOOLCHAIN]),
        }
        assert done == {label: first.labels[label] for label in CACHED}, (done, first.labels)

        # Indexed as they completed: findTask answers at once, with the task's own
        # extra.index (taskgraph's rank; data and expires defaulted as upstream does).
        for label in CACHED:
            task = await root.task(done[label])
            for namespace in namespaces[label]:
                found = await index.findTask(namespace)
                assert found == {
                    "namespace": namespace,
                    "taskId": done[label],
                    "rank": task["extra"]["index"]["rank"],
                    "data": {},
                    "expires": task["expires"],
                }, (namespace, found, task["extra"])

        # 2. A second push of the same revision: taskgraph finds both cached tasks.
        again = tmp_path / "push-again"
        git(tmp_path, "clone", "-q", str(push), str(again))
        assert git(again, "rev-parse", "HEAD") == revision
        second = await decision_task(
            root, http, root_url, again, provisioner_id=PROVISIONER, scopes=DECISION_SCOPES
        )
        # label-to-taskid.json maps the replaced tasks to the first run's.
        assert {label: second.labels[label] for label in CACHED} == done, second.labels
        assert set(second.labels) == {IMAGE, TOOLCHAIN, BUILD}, second.labels
        assert second.labels[BUILD] != first.labels[BUILD], second.labels
        # The graph it submitted holds only the build task, on the first run's tasks.
        second_graph = graph_by_label(second)
        assert set(second_graph) == {BUILD}, second_graph.keys()
        build_id = second.labels[BUILD]
        build = await root.task(build_id)
        assert build["taskGroupId"] == second.task_id, build
        # The first run's tasks, and the decision task, which taskgraph adds to a task none
        # of whose dependencies is in the graph it submits.
        assert build["dependencies"] == [*sorted(done.values()), second.task_id], (
            build["dependencies"],
            done,
        )
        assert build["payload"]["image"]["taskId"] == done[IMAGE], build["payload"]["image"]
        fetches = json.loads(build["payload"]["env"]["MOZ_FETCHES"])
        assert fetches == [
            {"artifact": ARTIFACTS[TOOLCHAIN][0], "extract": True, "task": done[TOOLCHAIN]}
        ], fetches
        # Nothing else was created in the second task group.
        group = await root.listTaskGroup(second.task_id)
        assert {t["status"]["taskId"] for t in group["tasks"]} == {second.task_id, build_id}, group

        # The build's dependencies were completed before it was created: it is pending as
        # soon as its decision task is done.
        async def build_pending() -> bool:
            state: str = (await root.status(build_id))["status"]["state"]
            assert state in ("unscheduled", "pending"), state
            return state == "pending"

        await wait_until(build_pending, within=30, interval=0.2, what="the build task pending")

    # 3. taskgraph's own single lookup (find_task_id: findTask), anonymously.
    found = await run_taskgraph_python(
        tmp_path,
        root_url,
        "import json, sys\n"
        "from taskgraph.util.taskcluster import find_task_id\n"
        "json.dump([find_task_id(path) for path in sys.argv[1:]], sys.stdout)",
        *namespaces[IMAGE],
        *namespaces[TOOLCHAIN],
    )
    assert found == [done[IMAGE]] * 2 + [done[TOOLCHAIN]] * 2, (found, done)

    coordinator_log = started.process.log_path.read_text(errors="replace")
    assert "Traceback" not in coordinator_log, coordinator_log[-5000:]


async def test_taskgraph_reads_an_artifact_through_the_index(
    coordinator_process: Callable[..., CoordinatorProcess],
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    tmp_path: Path,
) -> None:
    """taskgraph's ``get_artifact_from_index`` (findArtifactFromTask, then the ``Location`` it
    redirects to) reads a completed toolchain task's artifact through the index path the task
    indexed itself at, anonymously."""
    started = await start(coordinator_process, azurite, azure_namespace, tmp_path)
    namespace = "test.cache.level-1.toolchains.v3.hello.latest"
    await started.root.createTask(
        slugid.nice(),
        task_definition(
            provisionerId=PROVISIONER,
            workerType=BUILDERS.split("/")[1],
            schedulerId=SCHEDULER,
            routes=[f"index.{namespace}"],
            metadata={"name": "a toolchain"},
        ),
    )
    async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as http:
        task_id = await work_one(
            started.worker, http, started.root_url, BUILDERS, ARTIFACTS[TOOLCHAIN]
        )
    assert (await started.index.findTask(namespace))["taskId"] == task_id

    name, data = ARTIFACTS[TOOLCHAIN]
    read = await run_taskgraph_python(
        tmp_path,
        started.root_url,
        "import json, sys\n"
        "from taskgraph.util.taskcluster import get_artifact_from_index\n"
        "json.dump(get_artifact_from_index(*sys.argv[1:]).read().decode(), sys.stdout)",
        namespace,
        name,
    )
    assert read == data.decode(), read
