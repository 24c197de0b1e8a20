"""The publisher's own process (docs/events.md#the-publisher-process): a real
``queue-coordinator serve`` with publishing on delivers its messages through the test broker
from its child; the child SIGKILLed is restarted (one log line) and nothing is lost, every
message at least once and in order per task; SIGTERM of serve, and SIGKILL too, leave no
child behind."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import slugid

from coordinator.cli.publish_events import MODULE
from devharness.processes import log_tail, processes_mentioning
from devharness.waiting import wait_until
from tests.fixtures.coordinator import CoordinatorProcess
from tests.fixtures.pulse import AMQP_URL, LIFE, Listener, bindings, check_body, exchanges_of, live

MakeProcess = Callable[..., CoordinatorProcess]


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    listening = Listener()
    yield listening
    await listening.close()


def publishers(data_dir: Path) -> list[int]:
    """The pids of the live publisher processes of the coordinator on ``data_dir`` (its
    environment names the directory)."""
    return [
        pid for pid, command in processes_mentioning(str(data_dir)).items() if MODULE in command
    ]


async def one_publisher(data_dir: Path, *, other_than: int | None = None) -> int:
    """Wait for the single publisher process (a new one, if ``other_than`` is given)."""
    found: list[int] = []

    def started() -> bool:
        found[:] = publishers(data_dir)
        return len(found) == 1 and found[0] != other_than

    await wait_until(started, within=30, what="a publisher process")
    return found[0]


async def test_the_child_publishes_is_restarted_after_sigkill_and_loses_nothing(
    coordinator_process: MakeProcess, listener: Listener, tmp_path: Path
) -> None:
    group = slugid.nice()
    await listener.start(bindings(taskGroupId=group))
    process = coordinator_process(pulse_url=AMQP_URL, resolver_interval_ms=200)
    c = await process.start()
    assert process.process is not None
    child = await one_publisher(tmp_path)
    assert child != process.process.pid
    first = [await c.create(taskGroupId=group) for _ in range(3)]
    for task_id in first:
        await live(c, task_id)
    await listener.wait_for(lambda ms: all(exchanges_of(ms, t) == LIFE for t in first))

    # killed with messages still to publish, and more written while it is away
    more = [await c.create(taskGroupId=group) for _ in range(3)]
    os.kill(child, signal.SIGKILL)
    for task_id in more:
        await live(c, task_id)
    later = [await c.create(taskGroupId=group) for _ in range(3)]
    for task_id in later:
        await live(c, task_id)
    restarted = await one_publisher(tmp_path, other_than=child)
    task_ids = first + more + later
    await listener.wait_for(
        lambda ms: all(exchanges_of(ms, t) == LIFE for t in task_ids), within=60
    )
    for message in listener.messages:
        check_body(message.name, message.body)
    exited = [
        line
        for line in process.log_path.read_text().splitlines()
        if "event publisher process exited" in line
    ]
    assert len(exited) == 1, exited
    assert f"pid={child}" in exited[0] and f"status={-signal.SIGKILL}" in exited[0]
    assert process.process.returncode is None  # serve itself went on

    # the API process's /metrics counts what the child published
    async with c.session.get(f"{c.url}/metrics") as response:
        text = await response.text()
    completed = re.search(r'queue_events_published_total\{exchange="task-completed"\} (\S+)', text)
    assert completed is not None and float(completed.group(1)) >= len(task_ids), text

    await process.terminate()
    assert process.process.returncode == 0
    assert publishers(tmp_path) == []
    assert restarted not in processes_mentioning(str(tmp_path))
    assert "Traceback" not in log_tail(process.log_path, 100_000)


async def test_sigkill_of_serve_takes_its_publisher_with_it(
    coordinator_process: MakeProcess, tmp_path: Path
) -> None:
    process = coordinator_process(pulse_url=AMQP_URL)
    await process.start()
    await one_publisher(tmp_path)
    await process.kill()
    # the child's stdin ends with its parent: it stops on its own
    await wait_until(lambda: publishers(tmp_path) == [], within=20, what="no publisher left")


async def test_sigint_of_serve_stops_and_reaps_its_publisher(
    coordinator_process: MakeProcess, tmp_path: Path
) -> None:
    process = coordinator_process(pulse_url=AMQP_URL)
    await process.start()
    await one_publisher(tmp_path)
    await process.serve.stop(signal.SIGINT)
    assert process.process is not None and process.process.returncode == 0
    assert publishers(tmp_path) == []
    log = log_tail(process.log_path, 100_000)
    assert "Traceback" not in log
    assert "event publisher process" not in log  # a stop, not an exit to restart after
