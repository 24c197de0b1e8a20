"""The RabbitMQ permissions docs/operations.md gives the coordinator's user are enough: a
coordinator publishing as a user that may configure and write only the Taskcluster exchanges,
and read nothing, delivers a task's messages (the user is made with ``rabbitmqctl`` on the
test broker, and removed afterwards)."""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import slugid

from tests.fixtures.coordinator import CoordinatorProcess
from tests.fixtures.pulse import AMQP_URL, Listener, bindings

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def documented_permissions() -> list[str]:
    """configure, write and read, as the `rabbitmqctl set_permissions` snippet gives them."""
    text = OPERATIONS.read_text()
    snippet = text[text.index("rabbitmqctl set_permissions") :].split("\n\n")[0]
    patterns = re.findall(r"'([^']*)'", snippet)
    assert len(patterns) == 3, snippet
    return patterns


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture
def publisher_url() -> Iterator[str]:
    """The test broker's URL with a new user holding only the documented permissions."""
    if shutil.which("rabbitmqctl") is None:
        pytest.fail("rabbitmqctl is needed to make a RabbitMQ user (the README's requirements)")
    user, password = f"qc-publisher-{secrets.token_hex(4)}", secrets.token_hex(12)
    parts = urlsplit(AMQP_URL)
    vhost = parts.path.lstrip("/") or "/"
    rabbitmqctl("add_user", user, password)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, user, *documented_permissions())
        netloc = f"{user}:{password}@{parts.hostname}:{parts.port or 5672}"
        yield urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    finally:
        rabbitmqctl("delete_user", user)


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    listening = Listener()
    yield listening
    await listening.close()


async def test_the_documented_permissions_are_enough_to_publish(
    coordinator_process: Callable[..., CoordinatorProcess],
    publisher_url: str,
    listener: Listener,
) -> None:
    configure, write, read = documented_permissions()
    assert configure == write and "exchange/taskcluster-" in write
    assert read == "^$"  # the coordinator consumes nothing
    group = slugid.nice()
    await listener.start(bindings(taskGroupId=group))
    process = coordinator_process(pulse_url=publisher_url, resolver_interval_ms=200)
    c = await process.start()
    task_id = await c.create(taskGroupId=group)
    await c.claim(task_id, 0)
    await c.report(task_id, 0, "completed")
    life = ["task-defined", "task-pending", "task-running", "task-completed"]
    await listener.wait_for(lambda ms: [m.name for m in ms][:4] == life, within=30)
    await process.terminate()
    log = process.log_path.read_text()
    assert "ACCESS_REFUSED" not in log and "parked" not in log, log
