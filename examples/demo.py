"""Demo: create sample tasks at several priorities, run the example worker, print progress.

Against the dev coordinator (``./scripts/dev --demo`` does all of this for you)::

    ./scripts/dev                      # terminal 1; prints the three exports below
    export TASKCLUSTER_ROOT_URL=http://127.0.0.1:8080
    export TASKCLUSTER_CLIENT_ID=... TASKCLUSTER_ACCESS_TOKEN=...
    .venv/bin/python -m examples.demo  # terminal 2

It creates tasks for a fresh worker type (so old tasks don't interfere) with the official
``taskcluster`` client, starts ``queue-worker ... examples.hello:handle`` as a child process,
prints each state change until every task is resolved, then stops the worker with SIGTERM;
with ``--keep-running`` (what ``./scripts/dev --demo`` passes) it says where the dashboard
shows the tasks and keeps the worker until SIGINT or SIGTERM. Either signal, at any point,
stops the worker before the demo exits, so none outlives it. Because the tasks exist before
the worker starts, the start order shows the priorities at work: highest first. Exit status
0 when every task ended as its payload asked.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import taskcluster
import taskcluster.aio

PRIORITIES = ("highest", "very-high", "high", "medium", "low", "very-low", "lowest")
PROVISIONER_ID = "examples"


@dataclass(frozen=True, kw_only=True)
class Sample:
    task_id: str
    priority: str
    payload: dict[str, Any]
    expected: str
    """The state and reason the run should end in, e.g. ``completed``."""


def samples(count: int) -> list[Sample]:
    """``count`` tasks cycling through the priorities, lowest created first so that the
    worker's highest-first order is visible; one fails and one has a bad payload."""
    made = []
    for n in range(count):
        priority = PRIORITIES[-1 - n % len(PRIORITIES)]
        payload: dict[str, Any] = {"greeting": f"hello #{n}", "seconds": 0.5 + n % 3 * 0.5}
        expected = "completed"
        if n == count - 2:
            payload["fail"] = True
            expected = "failed"
        elif n == count - 1:
            payload["seconds"] = "a while"
            expected = "exception/malformed-payload"
        made.append(
            Sample(
                task_id=taskcluster.slugId(),
                priority=priority,
                payload=payload,
                expected=expected,
            )
        )
    return made


def definition(sample: Sample, worker_type: str) -> dict[str, Any]:
    return {
        "provisionerId": PROVISIONER_ID,
        "workerType": worker_type,
        "priority": sample.priority,
        "created": taskcluster.fromNowJSON("0 seconds"),
        "deadline": taskcluster.fromNowJSON("1 hour"),
        "payload": sample.payload,
        "metadata": {
            "name": f"demo {sample.payload.get('greeting')}",
            "description": "a sample task made by examples/demo.py",
            "owner": "demo@example.com",
            "source": "https://example.com/queue-coordinator/examples/demo.py",
        },
    }


def outcome(status: dict[str, Any]) -> str:
    last = status["runs"][-1] if status["runs"] else {}
    reason = last.get("reasonResolved")
    state: str = status["state"]
    return state if reason in (None, state) else f"{state}/{reason}"


def dashboard_url(root_url: str, worker_type: str) -> str:
    """The dashboard's list of the demo's task queue."""
    return f"{root_url}/ui/#/tasks?queue={quote(f'{PROVISIONER_ID}/{worker_type}', safe='')}"


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=14, help="how many tasks (default 14)")
    parser.add_argument("--capacity", type=int, default=2, help="worker capacity (default 2)")
    parser.add_argument(
        "--claim-work", action="store_true", help="run the worker in claimWork mode"
    )
    parser.add_argument("--timeout", type=float, default=300, help="give up after (seconds)")
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="once the tasks are resolved, keep the worker running until SIGINT or SIGTERM",
    )
    args = parser.parse_args(argv)
    if args.tasks < 2:
        parser.error("--tasks must be at least 2")

    os.environ.setdefault("TASKCLUSTER_ROOT_URL", "http://127.0.0.1:8080")
    options = taskcluster.optionsFromEnvironment()
    worker_type = f"hello-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)

    def say(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text}", flush=True)

    session = taskcluster.aio.createSession()
    async with session:
        queue = taskcluster.aio.Queue(options, session=session)
        say(f"coordinator {options['rootUrl']}: {await queue.ping()}")
        made = samples(args.tasks)
        for sample in made:
            await queue.createTask(sample.task_id, definition(sample, worker_type))
            say(f"created {sample.task_id} priority={sample.priority} payload={sample.payload}")

        command = [
            sys.executable,
            "-m",
            "worker_sdk.cli",
            "--provisioner-id",
            PROVISIONER_ID,
            "--worker-type",
            worker_type,
            "--capacity",
            str(args.capacity),
            "--log-level",
            "WARNING",
            *(["--claim-work"] if args.claim_work else []),
            "examples.hello:handle",
        ]
        say("starting: " + " ".join(command[1:]))
        # A process group of its own: a terminal's Ctrl-C reaches the demo only, which stops
        # the worker with one SIGTERM (a second signal could land after the worker's handlers
        # are gone and kill it mid-shutdown).
        worker = await asyncio.create_subprocess_exec(*command, process_group=0)
        states = {sample.task_id: "pending" for sample in made}
        try:
            while any(state in ("pending", "running") for state in states.values()):
                if worker.returncode is not None:
                    say(f"the worker exited early with status {worker.returncode}")
                    return 1
                if time.monotonic() - started > args.timeout:
                    say("timed out")
                    return 1
                if stop.is_set():
                    say("stopped before every task was resolved")
                    return 1
                for sample in made:
                    status = (await queue.status(sample.task_id))["status"]
                    state = outcome(status)
                    if state != states[sample.task_id]:
                        change = f"{states[sample.task_id]} -> {state}"
                        say(f"{sample.task_id} ({sample.priority:>9}) {change}")
                        states[sample.task_id] = state
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.5)
            wrong = [s for s in made if states[s.task_id] != s.expected]
            for sample in wrong:
                say(f"{sample.task_id} ended {states[sample.task_id]}, expected {sample.expected}")
            say(f"{len(made) - len(wrong)} of {len(made)} tasks ended as expected")
            if args.keep_running:
                url = dashboard_url(options["rootUrl"], worker_type)
                say(f"the demo's {len(made)} tasks are done; the dashboard: {url} (Ctrl-C to stop)")
                await stop.wait()
            return 1 if wrong else 0
        finally:
            if worker.returncode is None:
                worker.send_signal(signal.SIGTERM)
            say(f"worker stopped with status {await worker.wait()}")


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
