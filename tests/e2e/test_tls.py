"""HTTPS end to end: a real ``queue-coordinator serve`` process with ``COORDINATOR_TLS_CERT``
and ``COORDINATOR_TLS_KEY`` from a private CA (tests/fixtures/tls.py, auth on), and each kind
of client trusting that CA as docs/operations.md says: the official Python client through
``REQUESTS_CA_BUNDLE``, the Node client through ``NODE_EXTRA_CA_CERTS``
(``tests/e2e/node_tls.js``), a ``worker_sdk`` app dispatching to a real ``queue-worker``
process and the command line through ``SSL_CERT_FILE``. Without the CA each is refused with a
certificate verification error, which proves the connection is TLS. A TLS setting that cannot
work stops ``serve`` with one line and exit status 2 (every case: tests/unit/test_tls_settings.py),
and so does a ``queue-worker`` whose ``SSL_CERT_FILE`` cannot be loaded."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import slugid
from taskcluster.exceptions import TaskclusterConnectionError

from devharness.processes import REPO, end_processes, spawn
from devharness.tasks import task_definition
from tests.e2e import function_app
from tests.fixtures.clients import WT, Credentials, Queue, worker_scopes, write_clients
from tests.fixtures.commands import run_to_end, taskcluster_env
from tests.fixtures.coordinator import CoordinatorProcess, RunningCoordinator
from tests.fixtures.tls import PrivateCA
from worker_sdk import App, RequestFailed

PROVISIONER = "tls-prov"
BIN = Path(sys.executable).parent
NODE_SCRIPT = Path(__file__).with_name("node_tls.js")
NODE_CLIENT = REPO / "node_modules" / "taskcluster-client"
TIMEOUT_S = 120.0
VERIFY_FAILED = "CERTIFICATE_VERIFY_FAILED"
"""What OpenSSL's refusal of an untrusted certificate says, in Python's errors."""


@dataclass(kw_only=True)
class Https:
    """A coordinator process serving HTTPS, and its clients' credentials by clientId (root,
    and ``worker`` with the worker scopes of :data:`PROVISIONER`)."""

    coordinator: RunningCoordinator
    process: CoordinatorProcess
    credentials: dict[str, Credentials]

    @property
    def url(self) -> str:
        return self.coordinator.url


@pytest.fixture
async def https(
    coordinator_process: Callable[..., CoordinatorProcess], private_ca: PrivateCA, tmp_path: Path
) -> AsyncIterator[Https]:
    clients_file = tmp_path / "clients.json"
    credentials = write_clients(clients_file, {"worker": worker_scopes(PROVISIONER)})
    process = coordinator_process(
        auth_enabled=True,
        clients_file=clients_file,
        tls_cert=private_ca.cert_file,
        tls_key=private_ca.key_file,
    )
    coordinator = await process.start()
    yield Https(coordinator=coordinator, process=process, credentials=credentials)


def without_cas(env: dict[str, str]) -> dict[str, str]:
    """``env`` without any variable that names CAs to trust."""
    names = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
    return {k: v for k, v in env.items() if k not in names and k != "NODE_EXTRA_CA_CERTS"}


def definition() -> dict[str, object]:
    return task_definition(provisionerId=PROVISIONER, workerType=WT)


async def test_serve_says_https_and_the_official_python_client_needs_the_ca(
    https: Https, private_ca: PrivateCA, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = https.process.config.port
    assert https.url == f"https://127.0.0.1:{port}"
    assert (
        f"coordinator started url=https://127.0.0.1:{port} " in https.process.log_path.read_text()
    )

    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    untrusting = Queue("sync", https.url, https.credentials["root"])
    with pytest.raises(TaskclusterConnectionError) as refused:
        await untrusting.ping()
    assert VERIFY_FAILED in repr(refused.value.superExc)
    # aiohttp with the system's CAs (the aio client's, the SDK's transport) is refused alike
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError, match=VERIFY_FAILED):
            await session.get(f"{https.url}/api/queue/v1/ping")

    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(private_ca.ca_file))
    queue = Queue("sync", https.url, https.credentials["root"])
    task_id = slugid.nice()
    created = await queue.createTask(task_id, definition())
    assert created["status"]["state"] == "pending"
    read = await queue.status(task_id)
    assert (read["status"]["taskId"], read["status"]["state"]) == (task_id, "pending")


@pytest.mark.skipif(
    not NODE_CLIENT.exists(), reason=f"{NODE_CLIENT} is missing: ./scripts/test installs it"
)
async def test_the_node_client_creates_and_reads_a_task_with_node_extra_ca_certs(
    https: Https, private_ca: PrivateCA
) -> None:
    async def node(env: dict[str, str]) -> tuple[int, str, str]:
        request = {
            "rootUrl": https.url,
            "credentials": https.credentials["root"],
            "taskId": slugid.nice(),
            "task": definition(),
        }
        ran = await run_to_end(
            ["node", str(NODE_SCRIPT), json.dumps(request)],
            cwd=REPO,
            env=env,
            timeout_s=TIMEOUT_S,
        )
        return ran.status, ran.stdout, ran.stderr

    env = without_cas(taskcluster_env(https.url, None))
    status, _, stderr = await node(env)
    assert status == 1
    assert "unable to verify the first certificate" in stderr, stderr

    status, stdout, stderr = await node(env | {"NODE_EXTRA_CA_CERTS": str(private_ca.ca_file)})
    assert status == 0, stderr
    assert json.loads(stdout) == {"created": "pending", "read": "pending"}


async def test_an_sdk_app_dispatches_and_a_queue_worker_completes_it_over_https(
    https: Https, private_ca: PrivateCA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_queue = f"{PROVISIONER}/{WT}"
    app = App(root_url=https.url, credentials=https.credentials["root"], task_queue=task_queue)
    function_app.register(app)
    add = app.functions[f"{function_app.__name__}:add"]

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    async with app:
        with pytest.raises(RequestFailed, match=VERIFY_FAILED):
            await add.dispatch(1, 1)
    app.close()

    log = tmp_path / "worker.log"
    env = without_cas(taskcluster_env(https.url, https.credentials["worker"]))
    worker = await spawn(
        [
            str(BIN / "queue-worker"),
            "--worker-group",
            "wg",
            "--worker-id",
            "tls",
            "--app",
            "tests.e2e.function_app:app",
        ],
        env=env
        | {"SSL_CERT_FILE": str(private_ca.ca_file), function_app.TASK_QUEUE_ENV: task_queue},
        log=log,
    )
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(private_ca.ca_file))
        async with app:
            handle = await add.dispatch(2, 3)
            assert await handle.result(timeout=60) == 5, log.read_text()
        app.close()
        assert f"rootUrls={https.url}" in log.read_text()
    finally:
        await end_processes([worker], signum=signal.SIGTERM)


async def test_the_command_line_reads_over_https_with_ssl_cert_file(
    https: Https, private_ca: PrivateCA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(private_ca.ca_file))
    await Queue("sync", https.url, https.credentials["root"]).createTask(
        slugid.nice(), definition()
    )
    env = without_cas(taskcluster_env(https.url, https.credentials["root"]))
    count = [str(BIN / "queue-coordinator"), "tasks", "count", "--task-queue-id"]
    count.append(f"{PROVISIONER}/{WT}")

    trusting = await run_to_end(
        [*count, "--json"],
        cwd=tmp_path,
        env=env | {"SSL_CERT_FILE": str(private_ca.ca_file)},
        timeout_s=TIMEOUT_S,
    )
    assert trusting.status == 0, trusting.output
    assert json.loads(trusting.stdout)["total"] == 1

    untrusting = await run_to_end(count, cwd=tmp_path, env=env, timeout_s=TIMEOUT_S)
    assert untrusting.status == 2, untrusting.output
    assert untrusting.stdout == ""
    [said] = untrusting.stderr.splitlines()
    assert said.startswith(f"queue-coordinator: the certificate of {https.url}/api/queue/v1 is")
    assert VERIFY_FAILED in said and "set SSL_CERT_FILE" in said


async def test_a_tls_setting_or_ca_file_that_cannot_work_is_one_line_and_exit_status_2(
    private_ca: PrivateCA, tmp_path: Path
) -> None:
    env = without_cas(taskcluster_env("https://127.0.0.1:1", None))
    env = {k: v for k, v in env.items() if not k.startswith("COORDINATOR_")}
    serve = await run_to_end(
        [str(BIN / "queue-coordinator"), "serve"],
        cwd=tmp_path,
        env=env | {"COORDINATOR_TLS_CERT": str(private_ca.cert_file)},
        timeout_s=TIMEOUT_S,
    )
    assert serve.status == 2, serve.output
    assert serve.stdout == "" and "Traceback" not in serve.stderr
    [said] = serve.stderr.splitlines()
    assert said.startswith("queue-coordinator: COORDINATOR_TLS_CERT is set but COORDINATOR_TLS_KEY")

    missing = tmp_path / "no-ca.pem"
    worker = await run_to_end(
        [
            str(BIN / "queue-worker"),
            "--provisioner-id",
            "p",
            "--worker-type",
            "w",
            "examples.hello:handle",
        ],
        cwd=REPO,
        env=env | {"SSL_CERT_FILE": str(missing)},
        timeout_s=TIMEOUT_S,
    )
    assert worker.status == 2, worker.output
    assert "Traceback" not in worker.stderr
    [refusal] = [line for line in worker.stderr.splitlines() if "level=" not in line]
    assert refusal.startswith(f"queue-worker: SSL_CERT_FILE='{missing}' cannot be loaded")
    assert "point it at the PEM file of the CA" in refusal
