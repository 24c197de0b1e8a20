"""``isolation="process"`` against the coordinator test double: each run's handler in one of a
pool of pre-forked child processes, its outcome carried back, a crash failing only its own
run (and the pool replacing the process), children reused and recycled after
``max_runs_per_child``, and cancellation (a lost claim, a shutdown) ending the child.
tests/e2e/test_sdk_features_e2e.py runs it end to end.

The handlers are module-level functions, because a child process imports its handler by
name.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
import time
from pathlib import Path

import pytest

from tests.fixtures.coordinator_double import CoordinatorDouble, eventually
from tests.fixtures.sdk import make_worker, reports, running
from worker_sdk import MalformedPayload, RetryTask, TaskRun
from worker_sdk.isolation import HandlerError

log = logging.getLogger(__name__)


def isolated(run: TaskRun) -> None:
    """Does what ``payload["do"]`` says; writes its process id to ``payload["pid_file"]``."""
    payload = run.payload
    if "pid_file" in payload:
        Path(payload["pid_file"]).write_text(str(os.getpid()))
    log.warning("isolated handler taskId=%s", run.task_id)
    match payload["do"]:
        case "fail":
            raise RuntimeError("boom")
        case "retry":
            raise RetryTask("again, please")
        case "malformed":
            raise MalformedPayload("no command")
        case "exit":
            os._exit(3)
        case "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        case "hang":
            time.sleep(3600)


async def isolated_async(run: TaskRun) -> None:
    await asyncio.sleep(0)
    isolated(run)


OUTCOMES = {
    "complete": ("completed", None),
    "fail": ("failed", None),
    "retry": ("exception", "intermittent-task"),
    "malformed": ("exception", "malformed-payload"),
    "exit": ("exception", "internal-error"),
    "segfault": ("exception", "internal-error"),
}


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def ran_in(caplog: pytest.LogCaptureFixture) -> dict[str, int]:
    """taskId -> the process id of the handler that logged for it."""
    return {
        r.getMessage().removeprefix("isolated handler taskId="): r.process or 0
        for r in caplog.records
        if r.getMessage().startswith("isolated handler")
    }


def started(caplog: pytest.LogCaptureFixture) -> int:
    return sum(r.getMessage().startswith("handler process started") for r in caplog.records)


@pytest.mark.parametrize("handler", [isolated, isolated_async])
async def test_a_crash_fails_only_its_run_and_the_pool_replaces_its_process(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture, handler: object
) -> None:
    for do in OUTCOMES:
        double.add_task(f"t-{do}", payload={"do": do})

    assert callable(handler)
    async with running(make_worker(double, handler, capacity=3, isolation="process")):
        await eventually(lambda: len(double.reports) == len(OUTCOMES), within=30, what="reports")
    assert reports(double) == {f"t-{do}": outcome for do, outcome in OUTCOMES.items()}

    # A child that dies at once may take its last log records with it; the others arrive.
    pids = ran_in(caplog)
    survivors = ["complete", "fail", "retry", "malformed"]
    assert os.getpid() not in {pids[f"t-{do}"] for do in survivors}, "ran in the worker"
    messages = [r.getMessage() for r in caplog.records]
    assert "handler process died taskId=t-exit runId=0 exitCode=3" in messages
    assert f"handler process died taskId=t-segfault runId=0 exitCode=-{signal.SIGSEGV}" in messages
    assert started(caplog) == 3 + 2, "three pre-forked, and one in place of each that died"
    [failed] = [r for r in caplog.records if r.getMessage().startswith("handler failed")]
    assert isinstance(failed.exc_info and failed.exc_info[1], HandlerError)
    assert "RuntimeError: boom" in str(failed.exc_info and failed.exc_info[1])
    assert 'raise RuntimeError("boom")' in str(failed.exc_info and failed.exc_info[1])


@pytest.mark.parametrize(("max_runs", "processes"), [(None, 1), (2, 3)])
async def test_the_pool_is_pre_forked_reuses_its_processes_and_recycles_them(
    double: CoordinatorDouble,
    caplog: pytest.LogCaptureFixture,
    max_runs: int | None,
    processes: int,
) -> None:
    worker = make_worker(
        double, isolated, capacity=1, isolation="process", max_runs_per_child=max_runs
    )
    async with running(worker):
        await eventually(lambda: started(caplog) == 1, within=30, what="the pre-forked process")
        for i in range(6):
            double.add_task(f"t-{i}", payload={"do": "complete"})
        await eventually(lambda: len(double.reports) == 6, within=30, what="reports")
        if max_runs is not None:
            # The last process may retire after the last report; stopping the worker before
            # then would leave it no replacement to retire with runs=0.
            await eventually(lambda: started(caplog) == processes + 1, what="a replacement")
    pids = ran_in(caplog)
    assert len(pids) == 6 and os.getpid() not in pids.values()
    assert len(set(pids.values())) == processes, pids
    if max_runs is not None:
        assert sorted(collections.Counter(pids.values()).values()) == [2, 2, 2]
        retired = [r.getMessage() for r in caplog.records if "process retired" in r.getMessage()]
        assert [line.rpartition(" ")[2] for line in retired] == ["runs=2"] * 3 + ["runs=0"]


async def test_a_lost_claim_and_a_shutdown_end_the_child(
    double: CoordinatorDouble, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    double.claim_timeout_s = 2.0
    double.faults["reclaimRuns:t-lost/0"] = [409]  # the worker batches its reclaims
    lost, stopped = tmp_path / "lost.pid", tmp_path / "stopped.pid"
    worker = make_worker(double, isolated, isolation="process", grace_period=0.2)

    async with running(worker):
        # The task comes once the pool's process is up: a cold start can outlast the claim's
        # first reclaim, whose 409 would then cancel the run before any child had it.
        await eventually(lambda: started(caplog) == 1, within=30, what="the pool's process")
        double.add_task("t-lost", payload={"do": "hang", "pid_file": str(lost)})
        await eventually(lambda: lost.exists() and lost.read_text() != "", what="the child")
        await eventually(lambda: gone(int(lost.read_text())), what="the lost run's child ended")
        double.add_task("t-stopped", payload={"do": "hang", "pid_file": str(stopped)})
        await eventually(lambda: stopped.exists() and stopped.read_text() != "", what="child 2")
    assert gone(int(stopped.read_text())), "shutdown ended the child"
    assert reports(double) == {"t-stopped": ("exception", "worker-shutdown")}


def test_a_handler_a_child_cannot_import_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="importable by name"):
        make_worker(CoordinatorDouble(), lambda run: None, isolation="process")
    with pytest.raises(ValueError, match="max_runs_per_child needs isolation='process'"):
        make_worker(CoordinatorDouble(), isolated, max_runs_per_child=5)
