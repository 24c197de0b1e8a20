"""``queue-worker`` as a real child process against the coordinator test double: signals,
exit statuses, credentials from the environment, and the example handler."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.coordinator_double import BATCH_ROUTES, WORKER, CoordinatorDouble, eventually
from worker_sdk import TaskRun

REPO = Path(__file__).resolve().parents[2]


async def endless(run: TaskRun) -> None:
    """A handler that only ends by cancellation (imported by the child process)."""
    await asyncio.Event().wait()


def stubborn(run: TaskRun) -> None:
    """A sync handler that ignores ``run.cancelled`` (imported by the child process)."""
    time.sleep(3600)


async def queue_worker(
    coordinator: CoordinatorDouble, handler: str, *flags: str
) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "TASKCLUSTER_ROOT_URL": coordinator.root_url,
        "TASKCLUSTER_CLIENT_ID": WORKER.client_id,
        "TASKCLUSTER_ACCESS_TOKEN": WORKER.access_token,
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "worker_sdk.cli",
        "--provisioner-id",
        "prov",
        "--worker-type",
        "wt",
        *flags,
        handler,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


async def read_until(process: asyncio.subprocess.Process, text: str) -> str:
    """The child's output up to and including the first line containing ``text``."""
    assert process.stdout is not None
    lines: list[str] = []
    async with asyncio.timeout(30):
        while not lines or text not in lines[-1]:
            line = await process.stdout.readline()
            assert line, "the worker exited early:\n" + "".join(lines)
            lines.append(line.decode())
    return "".join(lines)


async def finish(process: asyncio.subprocess.Process, before: str = "") -> tuple[int, str]:
    output, _ = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode is not None
    return process.returncode, before + output.decode()


async def test_sigterm_cancels_after_the_grace_period_and_reports_worker_shutdown(
    double: CoordinatorDouble,
) -> None:
    double.add_task("t-endless")
    process = await queue_worker(double, "tests.e2e.test_sdk_cli:endless", "--grace-period", "0.3")
    started = await read_until(process, "run started taskId=t-endless runId=0")
    assert "level=INFO logger=worker_sdk.worker run started" in started
    process.send_signal(signal.SIGTERM)
    status, output = await finish(process, started)
    assert status == 0, output
    assert double.reports == [("t-endless", 0, "exception", "worker-shutdown")]
    assert "signal received signal=SIGTERM" in output
    assert "run cancelled by shutdown taskId=t-endless runId=0" in output


async def test_a_sync_handler_that_ignores_cancellation_does_not_hold_up_the_exit(
    double: CoordinatorDouble,
) -> None:
    double.add_task("t-stubborn")
    process = await queue_worker(double, "tests.e2e.test_sdk_cli:stubborn", "--grace-period", "0.2")
    started = await read_until(process, "run started taskId=t-stubborn runId=0")
    process.send_signal(signal.SIGTERM)
    status, output = await finish(process, started)
    assert status == 0, output
    assert double.reports == [("t-stubborn", 0, "exception", "worker-shutdown")]


async def test_sigint_lets_the_example_handler_finish_within_the_grace_period(
    double: CoordinatorDouble,
) -> None:
    double.add_task("t-hello", payload={"greeting": "hi", "seconds": 0.5})
    process = await queue_worker(double, "examples.hello:handle", "--grace-period", "30")
    started = await read_until(process, "hello taskId=t-hello runId=0 greeting='hi'")
    process.send_signal(signal.SIGINT)
    status, output = await finish(process, started)
    assert status == 0, output
    assert double.reports == [("t-hello", 0, "completed", None)]
    assert "signal received signal=SIGINT" in output


async def test_the_example_handler_rejects_a_bad_payload(double: CoordinatorDouble) -> None:
    double.add_task("t-bad", payload={"seconds": "a while"})
    process = await queue_worker(double, "examples.hello:handle", "--claim-work")
    await eventually(lambda: len(double.reports) == 1, what="the report")
    process.send_signal(signal.SIGTERM)
    status, output = await finish(process)
    assert status == 0, output
    assert double.reports == [("t-bad", 0, "exception", "malformed-payload")]
    assert double.routes("getMessages") == [], "--claim-work polls no Azure queue"


async def test_batches_the_empty_queue_skip_and_overlapping_polls_can_be_turned_off(
    double: CoordinatorDouble,
) -> None:
    double.add_task("t-hello", payload={"seconds": 0})
    process = await queue_worker(
        double,
        "examples.hello:handle",
        "--no-batching",
        "--empty-queue-skip",
        "0",
        "--polls-in-flight",
        "1",
        "--capacity",
        "4",
    )
    started = await read_until(process, "worker started")
    assert "batching=off emptyQueueSkip=0 pollsInFlight=1" in started
    await eventually(lambda: len(double.reports) == 1, what="the report")
    process.send_signal(signal.SIGTERM)
    status, output = await finish(process, started)
    assert status == 0, output
    assert [double.routes(name) for name in BATCH_ROUTES] == [[], [], []]
    assert double.routes("claimTask") == double.routes("completed") == ["t-hello/0"]


@pytest.mark.parametrize(("capacity", "polls"), [("1", 1), ("4", 2)])
async def test_two_polls_are_in_flight_where_the_capacity_has_room_for_them(
    double: CoordinatorDouble, capacity: str, polls: int
) -> None:
    process = await queue_worker(double, "examples.hello:handle", "--capacity", capacity)
    started = await read_until(process, "worker started")
    assert f"pollsInFlight={polls}" in started
    process.send_signal(signal.SIGTERM)
    status, output = await finish(process, started)
    assert status == 0, output


async def test_a_negative_empty_queue_skip_exits_with_status_2(double: CoordinatorDouble) -> None:
    process = await queue_worker(double, "examples.hello:handle", "--empty-queue-skip", "-1")
    status, output = await finish(process)
    assert status == 2, output
    assert "--empty-queue-skip: must not be negative" in output


async def test_no_polls_in_flight_exits_with_status_2(double: CoordinatorDouble) -> None:
    process = await queue_worker(double, "examples.hello:handle", "--polls-in-flight", "0")
    status, output = await finish(process)
    assert status == 2, output
    assert "--polls-in-flight" in output


async def test_a_refused_worker_exits_with_status_1(double: CoordinatorDouble) -> None:
    double.faults["pollTaskUrls"] = [403]
    status, output = await finish(await queue_worker(double, "examples.hello:handle"))
    assert status == 1, output
    assert "worker giving up" in output and "403" in output


async def test_a_supervisor_whose_workers_are_refused_exits_with_their_status(
    double: CoordinatorDouble,
) -> None:
    double.faults["pollTaskUrls"] = [403] * 10
    process = await queue_worker(double, "examples.hello:handle", "--processes", "2")
    status, output = await finish(process)
    assert status == 1, output
    assert "worker process cannot work, stopping all" in output
    assert "supervisor stopped status=1" in output


async def test_workers_whose_supervisor_was_killed_hand_their_runs_back_and_exit(
    double: CoordinatorDouble,
) -> None:
    double.add_task("t-endless")
    process = await queue_worker(
        double, "tests.e2e.test_sdk_cli:endless", "--processes", "2", "--grace-period", "0.3"
    )
    started = await read_until(process, "run started taskId=t-endless runId=0")
    process.kill()
    # The workers share the supervisor's output pipe: it ends once both have exited.
    _, output = await finish(process, started)
    assert output.count("supervisor gone, stopping") == 2
    assert double.reports == [("t-endless", 0, "exception", "worker-shutdown")]


async def test_a_handler_that_does_not_load_exits_with_status_2(double: CoordinatorDouble) -> None:
    status, output = await finish(await queue_worker(double, "examples.nowhere:handle"))
    assert status == 2, output
    assert "cannot load handler examples.nowhere:handle" in output
