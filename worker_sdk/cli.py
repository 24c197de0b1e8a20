"""``queue-worker``: run a handler function as a worker from the command line.

    queue-worker [--root-url URL ...] \\
        (--provisioner-id P --worker-type W | --task-queue P/W ...) \\
        [--polling strict|weighted [--weight PRIORITY=W ...]] \\
        [--worker-group G] [--worker-id ID] [--capacity N] [--claim-work] \\
        [--grace-period SECONDS] [--dequeue-warning N] [--retry-failures] \\
        [--isolation none|process [--max-runs-per-child N]] [--processes N] \\
        [--metrics-port PORT] \\
        [--no-batching] [--empty-queue-skip SECONDS] [--polls-in-flight N] \\
        [--idle-rate REQUESTS_PER_SECOND] \\
        [--no-run-log] (package.module:function | --app package.module:app)

Like the official Taskcluster tools it reads ``TASKCLUSTER_ROOT_URL`` (when ``--root-url`` is
not given), ``TASKCLUSTER_CLIENT_ID``, ``TASKCLUSTER_ACCESS_TOKEN`` and, for temporary
credentials, ``TASKCLUSTER_CERTIFICATE``. Without credentials requests go unsigned. The
current directory is importable, so ``queue-worker examples.hello:handle`` works from a
checkout. Exit status: 0 after a graceful stop, 1 when the coordinator refuses the worker,
2 for bad arguments. ``--root-url`` repeated names replicas of one coordinator in order of
preference (``Worker(root_urls=)``): the worker fails over to the next while one does not
answer, and stays with the one that does. ``--processes N`` runs N such workers under a
supervisor (:mod:`worker_sdk.supervisor`). ``--no-batching`` sends one request per claim,
reclaim and report instead of batches of runs (``Worker(batching=False)``), and
``--empty-queue-skip`` sets how long an Azure queue that answered empty is left alone
(``Worker(empty_queue_skip=)``), ``--polls-in-flight`` how many Azure gets and their claims
run at once (``Worker(polls_in_flight=)``), ``--idle-rate`` how many Azure requests a second
an idle worker backs off to (``Worker(idle_rate=)``). Each run's log (what its handler
logged, and its traceback) is uploaded as the artifact ``public/logs/live_backing.log`` before
the run is reported; ``--no-run-log`` turns that off (``Worker(run_log=False)``).

``--app package.module:app`` serves every function registered on that
:class:`~worker_sdk.app.App` (routed by each payload's ``function``) from the task queues its
functions use, or from those ``--task-queue`` names; ``--retry-failures`` does not go with it
(each function's ``retry_on`` and ``retry_with`` decide).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import importlib
import logging
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from hawk_signing import Credentials
from worker_sdk.app import App
from worker_sdk.errors import RequestFailed
from worker_sdk.handler_process import watch_parent
from worker_sdk.priorities import (
    DEFAULT_WEIGHTS,
    POLLINGS,
    Polling,
    TaskQueue,
    task_queues_of,
    weights_with,
)
from worker_sdk.runs import Handler, TaskRun
from worker_sdk.supervisor import SUPERVISOR_ENV, Supervisor
from worker_sdk.worker import (
    ISOLATIONS,
    Isolation,
    Worker,
    default_worker_group,
    default_worker_id,
)

log = logging.getLogger(__name__)

GC_YOUNGEST_THRESHOLD = 20_000
"""Net new container objects between two collections of the youngest generation (Python's
default is 700)."""


@dataclass(frozen=True, kw_only=True)
class Options:
    """Everything the command line and the environment say, validated."""

    root_urls: tuple[str, ...]
    credentials: Credentials | None
    task_queues: tuple[TaskQueue, ...]
    polling: Polling
    weights: dict[str, float]
    worker_group: str
    worker_id: str
    capacity: int
    claim_work: bool | None
    grace_period: float
    dequeue_warning: int
    retry_failures: bool
    isolation: Isolation
    max_runs_per_child: int | None
    processes: int
    metrics_port: int | None
    batching: bool
    empty_queue_skip: float
    polls_in_flight: int
    idle_rate: float
    run_log: bool
    handler: str | None
    """``package.module:function``, or ``None`` with :attr:`app`."""
    app: str | None
    """``package.module:app`` of ``--app``."""
    log_level: str


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must not be negative, not {value}")
    return value


def _skip(text: str) -> float:
    value = _seconds(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError("must be a finite number of seconds")
    return value


def _rate(text: str) -> float:
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def _root_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) URL")
    return text.rstrip("/")


def _task_queue(text: str) -> TaskQueue:
    try:
        return TaskQueue.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _weight(text: str) -> tuple[str, float]:
    priority, equals, number = text.partition("=")
    try:
        weight = float(number)
        weights_with({priority: weight})
    except ValueError as error:
        detail = error if equals else "not PRIORITY=WEIGHT"
        raise argparse.ArgumentTypeError(f"{text!r}: {detail}") from None
    return priority, weight


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queue-worker",
        description="Claim tasks of one or more task queues from a queue coordinator and run them.",
        epilog="Credentials come from TASKCLUSTER_CLIENT_ID, TASKCLUSTER_ACCESS_TOKEN and "
        "TASKCLUSTER_CERTIFICATE.",
    )
    parser.add_argument(
        "--root-url",
        action="append",
        type=_root_url,
        default=[],
        metavar="URL",
        help="coordinator root URL (default: $TASKCLUSTER_ROOT_URL); repeat it for replicas of "
        "one coordinator, in order of preference: the worker fails over to the next while one "
        "does not answer",
    )
    parser.add_argument("--provisioner-id", help="with --worker-type: a task queue")
    parser.add_argument("--worker-type", help="with --provisioner-id: a task queue")
    parser.add_argument(
        "--task-queue",
        action="append",
        type=_task_queue,
        default=[],
        metavar="PROVISIONER/WORKERTYPE",
        help="a task queue to take tasks from (repeat for more)",
    )
    parser.add_argument(
        "--polling",
        choices=POLLINGS,
        default="strict",
        help="strict: highest priority first (default); weighted: each priority gets a share "
        "of the claims by its weight",
    )
    parser.add_argument(
        "--weight",
        action="append",
        type=_weight,
        default=[],
        metavar="PRIORITY=WEIGHT",
        help="with --polling weighted: a priority's weight (repeatable; defaults: "
        + ", ".join(f"{p}={w:g}" for p, w in DEFAULT_WEIGHTS.items())
        + ")",
    )
    parser.add_argument("--worker-group", help="default: the short host name")
    parser.add_argument("--worker-id", help="default: host name and process id")
    parser.add_argument("--capacity", type=_positive_int, default=1, help="tasks at once")
    parser.add_argument(
        "--claim-work",
        action="store_true",
        default=None,
        help="claim through the coordinator's claimWork instead of polling Azure (without it: "
        "Azure, unless the coordinator dispatches from its store, then claimWork)",
    )
    parser.add_argument(
        "--grace-period",
        type=float,
        default=60.0,
        help="seconds running tasks get to finish after SIGTERM/SIGINT (default: 60)",
    )
    parser.add_argument(
        "--dequeue-warning",
        type=int,
        default=10,
        help="warn about hints dequeued more often than this (default: 10)",
    )
    parser.add_argument(
        "--retry-failures",
        action="store_true",
        help="report a handler's exceptions intermittent-task (retried) while the task has "
        "retries left, failed on its last run",
    )
    parser.add_argument(
        "--isolation",
        choices=ISOLATIONS,
        default="none",
        help="process: run each task's handler in one of a pool of --capacity child "
        "processes (default: none)",
    )
    parser.add_argument(
        "--max-runs-per-child",
        type=_positive_int,
        metavar="N",
        help="with --isolation process: replace a child process after N runs (default: never)",
    )
    parser.add_argument(
        "--processes",
        type=_positive_int,
        default=1,
        help="run this many worker processes under a supervisor (default: 1)",
    )
    parser.add_argument(
        "--metrics-port",
        type=_positive_int,
        help="serve Prometheus metrics on this port (with --processes N, child i on port+i)",
    )
    parser.add_argument(
        "--no-batching",
        dest="batching",
        action="store_false",
        help="one request per claim, reclaim and report, instead of claimRuns, reclaimRuns "
        "and resolveRuns for many runs at once (a coordinator without them is detected anyway)",
    )
    parser.add_argument(
        "--empty-queue-skip",
        type=_skip,
        default=1.0,
        metavar="SECONDS",
        help="poll an Azure queue that answered empty again only after half to all of this, "
        "which bounds how long a higher priority's new work may wait (default: 1; 0: never "
        "skip)",
    )
    parser.add_argument(
        "--polls-in-flight",
        type=_positive_int,
        default=2,
        metavar="N",
        help="Azure gets (with their claims) at once, each for its share of the capacity, so "
        "the next get goes out while the last one's hints are claimed (default: 2)",
    )
    parser.add_argument(
        "--idle-rate",
        type=_rate,
        default=1.0,
        metavar="REQUESTS_PER_SECOND",
        help="Azure requests a second, on average, that a worker finding no work backs off to: "
        "its pause doubles from 1 s with each empty pass until then (default: 1)",
    )
    parser.add_argument(
        "--no-run-log",
        dest="run_log",
        action="store_false",
        help="do not upload each run's log (what its handler logged, and its traceback) as "
        "the artifact public/logs/live_backing.log",
    )
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING"))
    parser.add_argument(
        "--app",
        metavar="PACKAGE.MODULE:APP",
        help="serve every function registered on this worker_sdk.App, from the task queues "
        "they use (or those --task-queue names), instead of one handler",
    )
    parser.add_argument(
        "handler", nargs="?", help="the handler, as package.module:function (or give --app)"
    )
    return parser


def parse_options(argv: Sequence[str], environ: Mapping[str, str]) -> Options:
    """Read the arguments and the environment; exits with status 2 on bad input."""
    parser = _parser()
    args = parser.parse_args(argv)
    root_urls: list[str] = args.root_url
    if not root_urls:
        from_environment = environ.get("TASKCLUSTER_ROOT_URL")
        if not from_environment:
            parser.error("give --root-url or set TASKCLUSTER_ROOT_URL")
        try:
            root_urls = [_root_url(from_environment)]
        except argparse.ArgumentTypeError as error:
            parser.error(f"TASKCLUSTER_ROOT_URL: {error}")
    if len(set(root_urls)) != len(root_urls):
        parser.error("a --root-url is given twice: give each replica once")
    if (args.handler is None) == (args.app is None):
        parser.error("give a handler (package.module:function) or --app package.module:app")
    if args.handler is not None and ":" not in args.handler:
        parser.error(f"handler {args.handler!r} is not of the form package.module:function")
    if args.app is not None and ":" not in args.app:
        parser.error(f"--app {args.app!r} is not of the form package.module:app")
    if args.app is not None and args.retry_failures:
        parser.error("--retry-failures does not go with --app: give functions retry_on")
    try:
        credentials = Credentials.from_environment(environ)
    except ValueError as error:
        parser.error(str(error))
    try:
        task_queues = (
            task_queues_of(args.provisioner_id, args.worker_type, args.task_queue)
            # an app knows its functions' task queues; --task-queue narrows them
            if args.app is None or args.task_queue or args.provisioner_id or args.worker_type
            else ()
        )
    except ValueError as error:
        parser.error(f"{error}: give --task-queue, or --provisioner-id and --worker-type")
    if args.weight and args.polling != "weighted":
        parser.error("--weight needs --polling weighted")
    if args.max_runs_per_child is not None and args.isolation != "process":
        parser.error("--max-runs-per-child needs --isolation process")
    if args.polling == "weighted" and args.claim_work:
        parser.error("--polling weighted needs Azure: claimWork picks by priority itself")
    return Options(
        root_urls=tuple(root_urls),
        credentials=credentials,
        task_queues=task_queues,
        polling=args.polling,
        weights=weights_with(dict(args.weight)),
        worker_group=args.worker_group or default_worker_group(),
        worker_id=args.worker_id or default_worker_id(),
        capacity=args.capacity,
        claim_work=args.claim_work,
        grace_period=args.grace_period,
        dequeue_warning=args.dequeue_warning,
        retry_failures=args.retry_failures,
        isolation=args.isolation,
        max_runs_per_child=args.max_runs_per_child,
        processes=args.processes,
        metrics_port=args.metrics_port,
        batching=args.batching,
        empty_queue_skip=args.empty_queue_skip,
        polls_in_flight=args.polls_in_flight,
        idle_rate=args.idle_rate,
        run_log=args.run_log,
        handler=args.handler,
        app=args.app,
        log_level=args.log_level,
    )


def _imported(spec: str) -> Any:
    """Import ``package.module:name`` (the name may be a dotted attribute path)."""
    module_name, _, attribute = spec.partition(":")
    target: Any = importlib.import_module(module_name)
    for name in attribute.split("."):
        target = getattr(target, name)
    return target


def load_handler(spec: str) -> Handler:
    """Import ``package.module:function``."""
    target = _imported(spec)
    if not callable(target):
        raise TypeError(f"{spec} is not callable")
    handler: Handler = target
    return handler


@functools.cache
def load_app(spec: str) -> App:
    """Import ``package.module:app``, an :class:`~worker_sdk.app.App` with functions."""
    target = _imported(spec)
    if not isinstance(target, App):
        raise TypeError(f"{spec} is a {type(target).__qualname__}, not a worker_sdk.App")
    if not target.functions:
        raise TypeError(f"{spec} has no functions: register some with @app.task")
    return target


@dataclass(frozen=True, kw_only=True)
class ServedApp:
    """The handler of ``--app``: the app named ``spec`` serves each run. It travels by that
    name, so under ``--isolation process`` each handler process imports the app itself (an
    App, with its connection, is not plain data)."""

    spec: str

    async def __call__(self, run: TaskRun) -> None:
        await load_app(self.spec).serve(run)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    options = parse_options(argv, os.environ)
    logging.basicConfig(
        level=options.log_level,
        # The coordinator's format, so both logs read (and parse) alike.
        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
    )
    # Console scripts don't put the current directory on sys.path; handlers usually live there.
    sys.path.insert(0, os.getcwd())
    task_queues = options.task_queues
    try:
        if options.app is not None:
            handler: Handler = ServedApp(spec=options.app)
            task_queues = task_queues or load_app(options.app).task_queues
        else:
            assert options.handler is not None
            handler = load_handler(options.handler)
    except (ImportError, AttributeError, TypeError, ValueError) as error:
        what = f"app {options.app}" if options.app is not None else f"handler {options.handler}"
        print(f"queue-worker: cannot load {what}: {error}", file=sys.stderr)
        return 2
    if options.processes > 1:
        supervisor = Supervisor(
            argv=argv,
            processes=options.processes,
            worker_id=options.worker_id,
            metrics_port=options.metrics_port,
        )
        return asyncio.run(supervisor.run())
    worker = Worker(
        root_urls=options.root_urls,
        credentials=options.credentials,
        task_queues=task_queues,
        polling=options.polling,
        weights=options.weights,
        worker_group=options.worker_group,
        worker_id=options.worker_id,
        handler=handler,
        capacity=options.capacity,
        claim_work=options.claim_work,
        grace_period=options.grace_period,
        dequeue_warning=options.dequeue_warning,
        retry_failures=options.retry_failures,
        isolation=options.isolation,
        max_runs_per_child=options.max_runs_per_child,
        metrics_port=options.metrics_port,
        batching=options.batching,
        empty_queue_skip=options.empty_queue_skip,
        polls_in_flight=options.polls_in_flight,
        idle_rate=options.idle_rate,
        run_log=options.run_log,
    )
    supervisor_pid = os.environ.get(SUPERVISOR_ENV)
    # As the coordinator does once serving: the modules loaded so far (the handler's too) are
    # frozen out of later collections, and the youngest generation is collected less often,
    # so that the collector's pauses do not delay the start of runs.
    gc.freeze()
    gc.set_threshold(GC_YOUNGEST_THRESHOLD, *gc.get_threshold()[1:])
    try:
        asyncio.run(_work(worker, int(supervisor_pid) if supervisor_pid else None))
    except RequestFailed:
        # Worker.run has logged why; retrying can't help (credentials, scopes, worker type).
        return 1
    return 0


async def _work(worker: Worker, supervisor_pid: int | None) -> None:
    """Run the worker; one that a supervisor started stops gracefully once it is gone."""
    if supervisor_pid is not None:
        loop = asyncio.get_running_loop()

        def orphaned() -> None:
            log.warning("supervisor gone, stopping supervisorPid=%d", supervisor_pid)
            # RuntimeError: the loop has closed, the worker is done anyway.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(worker.stop)

        watch_parent(orphaned, parent=supervisor_pid)
    await worker.run()


if __name__ == "__main__":
    sys.exit(main())
