"""docker-compose.yml, the Dockerfile and .dockerignore, checked without Docker (this machine
has no engine): the files are parsed and compared with the source they must agree with, and
the commands the containers would run are run here, against the test PostgreSQL and Azurite,
with only host names, ports and paths swapped for local ones.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import shlex
import stat
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import slugid
import taskcluster.aio
import yaml

from coordinator.api import validation
from coordinator.cli.main import _parser
from coordinator.config import Config
from devharness import azurite as azurite_module
from devharness.azurite import AzuriteProcess
from devharness.ports import free_port
from devharness.processes import end_processes, spawn
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.pulse import AMQP_URL

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DATA_DIR = "/data"


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return document


def services() -> dict[str, Any]:
    found: dict[str, Any] = compose()["services"]
    return found


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as strings (the mapping form, which the file uses)."""
    env = service.get("environment", {})
    assert isinstance(env, dict), "use the mapping form of environment:"
    return {name: str(value) for name, value in env.items()}


def command(service: dict[str, Any]) -> list[str]:
    value = service["command"]
    return [str(part) for part in value] if isinstance(value, list) else shlex.split(value)


def option(args: list[str], name: str) -> str:
    assert name in args, f"{name} missing from {args}"
    return args[args.index(name) + 1]


def variables_the_coordinator_reads() -> set[str]:
    """Every environment variable name spelled out in coordinator/config.py and
    coordinator/cli/main.py (where ``serve`` reads its settings)."""
    names = set()
    for module in ("config.py", "cli/main.py"):
        tree = ast.parse((ROOT / "coordinator" / module).read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.fullmatch(r"(COORDINATOR|AZURE)_[A-Z_]+", node.value)
            ):
                names.add(node.value)
    return names


def connection_string_fields(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(";") if part)


def volume_mounts(service: dict[str, Any]) -> dict[str, str]:
    """``container path -> volume name`` of a service's short-form volume mounts."""
    mounts = {}
    for entry in service.get("volumes", []):
        source, target = str(entry).split(":")[:2]
        mounts[target] = source
    return mounts


# --- docker-compose.yml ----------------------------------------------------------------------


def test_the_three_services_and_their_images() -> None:
    found = services()
    assert {"coordinator", "azurite", "postgres", "rabbitmq", "worker"} <= set(found)
    assert found["postgres"]["image"].startswith("postgres:15.")
    assert found["coordinator"]["build"] == "."
    # The same Azurite as the tests and ./scripts/dev run (package-lock.json); later images
    # replaced Node and the azurite-queue command with a single binary.
    lock = json.loads((ROOT / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/azurite"]["version"]
    assert found["azurite"]["image"] == f"mcr.microsoft.com/azure-storage/azurite:{pinned}"
    args = command(found["azurite"])
    assert args[0] == "azurite-queue"
    assert option(args, "--queueHost") == "0.0.0.0"
    assert {"--skipApiVersionCheck", "--loose"} <= set(args)


def test_the_variable_extraction_finds_the_known_names() -> None:
    names = variables_the_coordinator_reads()
    assert {
        "COORDINATOR_HOST",
        "COORDINATOR_STORE_URL",
        "COORDINATOR_CLAIM_TIMEOUT",
        "COORDINATOR_LOG_LEVEL",
        "AZURE_STORAGE_CONNECTION_STRING",
    } <= names


@pytest.mark.parametrize("service", ["coordinator", "clients"])
def test_every_variable_set_is_one_the_coordinator_reads(service: str) -> None:
    env = environment(services()[service])
    assert env, f"{service} sets no environment"
    assert set(env) - variables_the_coordinator_reads() == set()


def test_the_coordinator_environment_points_at_the_other_services() -> None:
    found = services()
    env = environment(found["coordinator"])
    config = Config.from_env(env)
    assert config.host == "0.0.0.0"
    assert f"127.0.0.1:{config.port}:{config.port}" in found["coordinator"]["ports"]
    assert urlsplit(config.public_url).port == config.port

    store = urlsplit(config.store_url)
    postgres = environment(found["postgres"])
    assert store.scheme == "postgresql"
    assert (store.hostname, store.port) == ("postgres", 5432)
    assert store.username == postgres["POSTGRES_USER"]
    assert store.password == postgres["POSTGRES_PASSWORD"]
    assert store.path == "/" + postgres["POSTGRES_DB"]

    assert config.azure_connection_string is not None
    azure = connection_string_fields(config.azure_connection_string)
    assert azure["AccountName"] == azurite_module.ACCOUNT_NAME
    assert azure["AccountKey"] == azurite_module.ACCOUNT_KEY
    endpoint = urlsplit(azure["QueueEndpoint"])
    queue_port = int(option(command(found["azurite"]), "--queuePort"))
    assert (endpoint.hostname, endpoint.port) == ("azurite", queue_port)
    assert endpoint.path == "/" + azurite_module.ACCOUNT_NAME


def test_the_clients_file_is_on_the_volume_the_clients_service_writes() -> None:
    found = services()
    config = Config.from_env(environment(found["coordinator"]))
    clients_env = environment(found["clients"])
    assert str(config.clients_file) == clients_env["COORDINATOR_CLIENTS_FILE"]
    assert str(config.data_dir) == DATA_DIR
    assert config.clients_file.parent == config.data_dir
    coordinator_volume = volume_mounts(found["coordinator"])[DATA_DIR]
    assert volume_mounts(found["clients"])[DATA_DIR] == coordinator_volume
    assert coordinator_volume in compose()["volumes"]


def test_the_coordinator_waits_for_healthy_dependencies() -> None:
    found = services()
    depends = found["coordinator"]["depends_on"]
    assert depends["postgres"]["condition"] == "service_healthy"
    assert depends["rabbitmq"]["condition"] == "service_healthy"
    assert depends["azurite"]["condition"] == "service_healthy"
    assert depends["clients"]["condition"] == "service_completed_successfully"
    for name in ("postgres", "azurite", "rabbitmq", "coordinator"):
        test = found[name]["healthcheck"]["test"]
        assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name


def test_the_health_checks_probe_the_ports_the_services_listen_on() -> None:
    found = services()
    config = Config.from_env(environment(found["coordinator"]))
    coordinator_probe = " ".join(found["coordinator"]["healthcheck"]["test"])
    assert f"127.0.0.1:{config.port}/api/queue/v1/ping" in coordinator_probe
    queue_port = option(command(found["azurite"]), "--queuePort")
    assert f"127.0.0.1:{queue_port}/" in " ".join(found["azurite"]["healthcheck"]["test"])
    postgres = environment(found["postgres"])
    postgres_probe = " ".join(found["postgres"]["healthcheck"]["test"])
    assert f"-U {postgres['POSTGRES_USER']} -d {postgres['POSTGRES_DB']}" in postgres_probe


def test_ports_are_published_on_loopback_only() -> None:
    published = {name: s.get("ports", []) for name, s in services().items()}
    assert published["coordinator"] and published["rabbitmq"] and published["azurite"]
    for name, ports in published.items():
        for port in ports:
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_images_are_pinned_and_long_running_services_restart() -> None:
    for name, service in services().items():
        if "image" in service and "build" not in service and name != "worker":
            tag = service["image"].rsplit(":", 1)[1]
            # a version, not a moving major or `latest`
            assert re.match(r"\d+\.\d+(\.\d+)?(-[a-z]+)?$", tag), f"{name}: {service['image']}"
        restart = service.get("restart", "no")
        assert restart == ("no" if name == "clients" else "unless-stopped"), name


def test_the_worker_service_shares_the_coordinators_network_and_data() -> None:
    found = services()
    worker = found["worker"]
    assert worker["image"] == found["coordinator"]["image"]
    assert worker["network_mode"] == "service:coordinator"
    assert worker["depends_on"]["coordinator"]["condition"] == "service_healthy"
    env = environment(worker)
    public_url = environment(found["coordinator"])["COORDINATOR_PUBLIC_URL"]
    assert env["TASKCLUSTER_ROOT_URL"] == public_url  # what Hawk signatures must name
    data_volume = volume_mounts(found["coordinator"])[DATA_DIR]
    assert f"{data_volume}:{DATA_DIR}:ro" in worker["volumes"]
    assert (
        env["COORDINATOR_CLIENTS_FILE"] == environment(found["clients"])["COORDINATOR_CLIENTS_FILE"]
    )


def test_the_coordinator_publishes_to_the_rabbitmq_service() -> None:
    found = services()
    assert found["rabbitmq"]["image"].startswith("rabbitmq:3.")
    config = Config.from_env(environment(found["coordinator"]))
    assert config.pulse_url is not None
    broker = urlsplit(config.pulse_url)
    rabbitmq = environment(found["rabbitmq"])
    assert (broker.scheme, broker.hostname, broker.port) == ("amqp", "rabbitmq", 5672)
    assert broker.username == rabbitmq["RABBITMQ_DEFAULT_USER"]
    assert broker.password == rabbitmq["RABBITMQ_DEFAULT_PASS"]
    assert "127.0.0.1:5672:5672" in found["rabbitmq"]["ports"]
    assert "check_port_connectivity" in " ".join(found["rabbitmq"]["healthcheck"]["test"])


# --- Dockerfile ----------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += " " + stripped.removesuffix("\\")
        if not stripped.endswith("\\"):
            keyword, _, arguments = pending.strip().partition(" ")
            instructions.append((keyword.upper(), arguments.strip()))
            pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def arguments(instruction: str) -> list[str]:
    """The JSON (exec) form or the whitespace-separated form."""
    if instruction.startswith("["):
        parsed: list[str] = json.loads(instruction)
        return parsed
    return instruction.split()


def copies() -> list[tuple[list[str], str]]:
    """``(sources, destination)`` of every COPY, destinations made absolute under WORKDIR."""
    workdir = "/"
    found = []
    for keyword, args in dockerfile():
        if keyword == "WORKDIR":
            workdir = args
        if keyword == "COPY":
            parts = [part for part in arguments(args) if not part.startswith("--")]
            destination = parts[-1] if parts[-1].startswith("/") else f"{workdir}/{parts[-1]}"
            found.append((parts[:-1], os.path.normpath(destination)))
    return found


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore excludes ``path`` (or a directory above it); ``*`` within a
    name, ``**`` across directories, as Docker matches them."""
    for pattern in patterns:
        regex = re.escape(pattern.strip("/")).replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        parts = path.split("/")
        if any(re.fullmatch(regex, "/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            return True
    return False


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_image_is_python_311_slim() -> None:
    base = [args for keyword, args in dockerfile() if keyword == "FROM"]
    assert base == ["python:3.11-slim"]
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"


def test_every_copied_source_exists_and_is_not_ignored() -> None:
    patterns = dockerignore()
    found = copies()
    assert found
    for sources, _ in found:
        for source in sources:
            assert (ROOT / source).exists(), source
            assert not ignored(source.rstrip("/"), patterns), source
    # the files the package needs at run time, deep inside the copied directories
    for needed in [
        *ROOT.glob("coordinator/store/sql/*/*.sql"),
        *validation.SCHEMAS_DIR.glob("*.json"),
    ]:
        assert not ignored(str(needed.relative_to(ROOT)), patterns), needed
    # and what the ignore file is for
    assert ignored(".venv", patterns) and ignored("node_modules", patterns)
    assert ignored("coordinator/__pycache__", patterns)


def test_the_copies_are_what_pip_install_and_serve_need() -> None:
    copied = {os.path.normpath(source): dest for sources, dest in copies() for source in sources}
    workdir = [args for keyword, args in dockerfile() if keyword == "WORKDIR"][-1]
    assert "pyproject.toml" in copied
    assert PYPROJECT["project"]["readme"] in copied  # setuptools reads it while building
    setuptools = PYPROJECT["tool"]["setuptools"]
    # every top-level package's source directory, and every directory a package is mapped to
    # (coordinator.schemas is the top-level schemas/)
    mapped = setuptools.get("package-dir", {})
    sources = {name.split(".")[0] for name in setuptools["packages"]} | set(mapped.values())
    for source in sources:
        assert copied.get(source) == f"{workdir}/{source}", f"the Dockerfile copies no {source}/"
    installs = [
        args for keyword, args in dockerfile() if keyword == "RUN" and "pip install" in args
    ]
    assert len(installs) == 1
    assert re.search(r"pip install \.(\s|$)", installs[0]), installs[0]


def test_the_command_is_a_declared_console_script_serving_on_all_interfaces() -> None:
    cmd = [args for keyword, args in dockerfile() if keyword == "CMD"]
    assert len(cmd) == 1 and cmd[0].startswith("["), "CMD in exec form, once"
    program, *rest = arguments(cmd[0])
    assert program in PYPROJECT["project"]["scripts"]
    assert PYPROJECT["project"]["scripts"][program] == "coordinator.cli.main:main"
    assert _parser().parse_args(rest).command == "serve"
    env = " ".join(args for keyword, args in dockerfile() if keyword == "ENV")
    assert "COORDINATOR_HOST=0.0.0.0" in env
    exposed = [args for keyword, args in dockerfile() if keyword == "EXPOSE"]
    assert exposed == [environment(services()["coordinator"])["COORDINATOR_PORT"]]


# --- the containers' commands, run here -------------------------------------------------------


def run_the_clients_service(clients: dict[str, Any], local: str) -> dict[str, str]:
    """Run the clients service's script here, with /data at ``local``; check the file it
    made and return the ``export NAME=value`` lines it printed."""
    env = {**os.environ, **{k: v.replace(DATA_DIR, local) for k, v in environment(clients).items()}}
    args = command(clients)
    assert args[0] == "python"
    done = subprocess.run(
        [sys.executable, *args[1:]], env=env, capture_output=True, text=True, check=True
    )
    exports = dict(line.removeprefix("export ").split("=", 1) for line in done.stdout.splitlines())
    clients_file = Path(env["COORDINATOR_CLIENTS_FILE"])
    assert clients_file.parent == Path(local)
    assert stat.S_IMODE(clients_file.stat().st_mode) == 0o600
    stored = {c["clientId"]: c for c in json.loads(clients_file.read_text())["clients"]}
    root = stored[exports["TASKCLUSTER_CLIENT_ID"]]
    assert root["accessToken"] == exports["TASKCLUSTER_ACCESS_TOKEN"]
    assert root["scopes"] == ["*"]
    # a second start (a restart of the stack) keeps the file and prints the same client
    again = subprocess.run(
        [sys.executable, *args[1:]], env=env, capture_output=True, text=True, check=True
    )
    assert again.stdout == done.stdout
    return exports


def worker_env(worker: dict[str, Any], local: str, root_url: str) -> dict[str, str]:
    """The worker service's environment here: /data at ``local``, the repository as /app (its
    examples mount), the local coordinator's URL, and this venv's commands first on PATH."""
    env = {k: v.replace(DATA_DIR, local) for k, v in environment(worker).items()}
    env["TASKCLUSTER_ROOT_URL"] = root_url
    env["PYTHONPATH"] = str(ROOT)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, **env, "PATH": path}


def worker_command(worker: dict[str, Any]) -> list[str]:
    """The worker service's ``sh -c`` command as it stands (it reads its credentials from the
    clients file named in its environment)."""
    args = command(worker)
    assert args[:2] == ["sh", "-c"]
    assert "examples/hello" in args[2] and "examples.hello:handle" in args[2]
    return args


async def exit_code(args: list[str]) -> int:
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    return await process.wait()


async def test_the_compose_commands_start_a_working_coordinator(
    tmp_path: Path, postgres_schema_url: str, azurite: AzuriteProcess
) -> None:
    """The clients service's script, then the image's CMD with the coordinator service's
    environment (hosts, ports and /data swapped for local ones), then both health checks."""
    found = services()
    local = str(tmp_path)

    exports = run_the_clients_service(found["clients"], local)
    assert (
        exports["TASKCLUSTER_ROOT_URL"]
        == (environment(found["coordinator"])["COORDINATOR_PUBLIC_URL"])
    )

    # coordinator: the CMD with the service's environment
    port = free_port()
    compose_env = environment(found["coordinator"])
    azure = connection_string_fields(compose_env["AZURE_STORAGE_CONNECTION_STRING"])
    azure["QueueEndpoint"] = azurite.endpoint
    local_env = {
        **compose_env,
        "COORDINATOR_HOST": "127.0.0.1",
        "COORDINATOR_PORT": str(port),
        "COORDINATOR_PUBLIC_URL": compose_env["COORDINATOR_PUBLIC_URL"].replace(
            compose_env["COORDINATOR_PORT"], str(port)
        ),
        "COORDINATOR_STORE_URL": postgres_schema_url,
        "AZURE_STORAGE_CONNECTION_STRING": ";".join(f"{k}={v}" for k, v in azure.items()) + ";",
        "COORDINATOR_QUEUE_PREFIX": f"t{uuid.uuid4().hex[:10]}-",
        # the test broker in place of the rabbitmq service
        "COORDINATOR_PULSE_URL": AMQP_URL,
    }
    local_env = {k: v.replace(DATA_DIR, local) for k, v in local_env.items()}
    cmd = arguments(next(args for keyword, args in dockerfile() if keyword == "CMD"))
    program = str(Path(sys.executable).parent / cmd[0])
    root_url = local_env["COORDINATOR_PUBLIC_URL"]

    proc = await spawn(
        [program, *cmd[1:]], env={**os.environ, **local_env}, log=tmp_path / "serve.log"
    )
    try:
        probe = [
            sys.executable
            if part == "python"
            else part.replace(compose_env["COORDINATOR_PORT"], str(port))
            for part in found["coordinator"]["healthcheck"]["test"][1:]
        ]

        async def healthy() -> bool:
            assert proc.returncode is None, (tmp_path / "serve.log").read_text()[-3000:]
            return await exit_code(probe) == 0

        await wait_until(healthy, within=30, what="the coordinator health check to pass")
        log = (tmp_path / "serve.log").read_text()
        assert "store=" in log and "dispatch=azure artifacts=directory auth=True" in log

        # authenticated, through the official client, with the printed root credentials
        queue = taskcluster.aio.Queue(
            {
                "rootUrl": root_url,
                "credentials": {
                    "clientId": exports["TASKCLUSTER_CLIENT_ID"],
                    "accessToken": exports["TASKCLUSTER_ACCESS_TOKEN"],
                },
                "maxRetries": 0,
            }
        )
        task_id = slugid.nice()
        created = await queue.createTask(task_id, task_definition())
        assert created["status"]["state"] == "pending"

        # the worker service's command, with the worker client the clients service added
        hello = slugid.nice()
        await queue.createTask(
            hello,
            task_definition(provisionerId="examples", workerType="hello", payload={"seconds": 0}),
        )
        worker = await spawn(
            worker_command(found["worker"]),
            env=worker_env(found["worker"], local, root_url),
            log=tmp_path / "worker.log",
        )
        try:

            async def completed() -> bool:
                assert worker.returncode is None, (tmp_path / "worker.log").read_text()[-3000:]
                status = await queue.status(hello)
                return bool(status["status"]["state"] == "completed")

            await wait_until(completed, within=60, what="the worker service to complete a task")
        finally:
            await end_processes([worker])
        log = (tmp_path / "worker.log").read_text()
        assert "clientId" not in log and exports["TASKCLUSTER_ACCESS_TOKEN"] not in log
    finally:
        await end_processes([proc])
    # the probe is not trivially true: with the coordinator gone it fails
    assert await exit_code(probe) != 0

    # the Azurite health check, on the test Azurite's port
    queue_port = option(command(found["azurite"]), "--queuePort")
    azurite_probe = [
        part.replace(f":{queue_port}/", f":{azurite.port}/")
        for part in found["azurite"]["healthcheck"]["test"][1:]
    ]
    assert await exit_code(azurite_probe) == 0
    dead_port = free_port()
    dead_probe = [part.replace(f":{azurite.port}/", f":{dead_port}/") for part in azurite_probe]
    assert await exit_code(dead_probe) != 0
