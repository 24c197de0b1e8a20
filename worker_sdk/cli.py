"""``queue-worker``: run a handler function as a worker from the command line.

    queue-worker [OPTION ...] (package.module:function | --app package.module:app)

Its flags are the worker's options (:class:`~worker_sdk.options.WorkerOptions`, each field's
:class:`~worker_sdk.options.Flag`) and the command's own (:class:`CommandOptions`);
``queue-worker --help`` lists them, docs/worker-sdk.md says what each does. Like the official
Taskcluster tools it reads ``TASKCLUSTER_ROOT_URL`` (when ``--root-url`` is not given),
``TASKCLUSTER_CLIENT_ID``, ``TASKCLUSTER_ACCESS_TOKEN`` and, for temporary credentials,
``TASKCLUSTER_CERTIFICATE``. Without credentials requests go unsigned. The current directory
is importable, so ``queue-worker examples.hello:handle`` works from a checkout. Exit status: 0
after a graceful stop, 1 when the coordinator refuses the worker, 2 for bad arguments.
``--processes N`` runs N such workers under a supervisor (:mod:`worker_sdk.supervisor`).

``--app package.module:app`` serves every function registered on that
:class:`~worker_sdk.app.App` (routed by each payload's ``function``) from the task queues its
functions use, or from those ``--task-queue`` names; ``--retry-failures`` does not go with it
(each function's ``retry_on`` and ``retry_with`` decide).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import gc
import importlib
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import glibc_malloc
from hawk_signing import Credentials
from key_value_logs import KeyValueFormatter, lean_log_records
from worker_sdk.app import App
from worker_sdk.errors import RequestFailed
from worker_sdk.handler_process import watch_parent
from worker_sdk.options import (
    Flag,
    WorkerOptions,
    add_flags,
    cli,
    flag_of,
    parsed_default,
    positive_int,
)
from worker_sdk.priorities import task_queues_of, weights_with
from worker_sdk.runs import Handler, TaskRun
from worker_sdk.supervisor import SUPERVISOR_ENV, Supervisor
from worker_sdk.worker import Worker, default_worker_group, default_worker_id

log = logging.getLogger(__name__)

GC_YOUNGEST_THRESHOLD = 20_000
"""Net new container objects between two collections of the youngest generation (Python's
default is 700)."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING")


@dataclass(frozen=True, kw_only=True)
class CommandOptions:
    """What ``queue-worker`` takes besides the worker's options (:class:`WorkerOptions`)."""

    handler: str | None = field(
        default=None,
        metadata=cli(
            Flag(name="handler", help="the handler, as package.module:function (or give --app)"),
        ),
    )
    app: str | None = field(
        default=None,
        metadata=cli(
            Flag(
                name="--app",
                metavar="PACKAGE.MODULE:APP",
                help="serve every function registered on this worker_sdk.App, from the task queues "
                "they use (or those --task-queue names), instead of one handler",
            ),
        ),
    )
    processes: int = field(
        default=1,
        metadata=cli(
            Flag(
                name="--processes",
                parse=positive_int,
                help="run this many worker processes under a supervisor (default: %(default)s)",
            ),
        ),
    )
    log_level: str = field(
        default="INFO",
        metadata=cli(
            Flag(
                name="--log-level",
                choices=LOG_LEVELS,
                help="the log level, and so what run logs hold (default: %(default)s)",
            ),
        ),
    )


@dataclass(frozen=True, kw_only=True)
class Options:
    """Everything the command line and the environment say, validated: the worker's options
    (its task queues, weights, root URLs and identity filled in) and the command's."""

    worker: WorkerOptions
    command: CommandOptions


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queue-worker",
        description="Claim tasks of one or more task queues from a queue coordinator and run them.",
        epilog="Credentials come from TASKCLUSTER_CLIENT_ID, TASKCLUSTER_ACCESS_TOKEN and "
        "TASKCLUSTER_CERTIFICATE.",
    )
    add_flags(parser, WorkerOptions)
    add_flags(parser, CommandOptions)
    return parser


def _given(
    parser: argparse.ArgumentParser, args: argparse.Namespace, environ: Mapping[str, str]
) -> dict[str, Any]:
    """The worker's options the flags gave; a flag not given falls back to its environment
    variable."""
    given: dict[str, Any] = {}
    for option_field in dataclasses.fields(WorkerOptions):
        flag = flag_of(option_field)
        if flag is None:
            continue
        value = getattr(args, option_field.name)
        text = environ.get(flag.env) if flag.env is not None else None
        if value == parsed_default(option_field, flag) and text and flag.parse is not None:
            try:
                read = flag.parse(text)
            except argparse.ArgumentTypeError as error:
                parser.error(f"{flag.env}: {error}")
            value = [read] if flag.action == "append" else read
        given[option_field.name] = value
    return given


def parse_options(argv: Sequence[str], environ: Mapping[str, str]) -> Options:
    """Read the arguments and the environment; exits with status 2 on bad input."""
    parser = _parser()
    args = parser.parse_args(argv)
    command = CommandOptions(
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(CommandOptions)}
    )
    given = _given(parser, args, environ)
    root_urls: list[str] = given["root_urls"]
    if not root_urls:
        parser.error("give --root-url or set TASKCLUSTER_ROOT_URL")
    if len(set(root_urls)) != len(root_urls):
        parser.error("a --root-url is given twice: give each replica once")
    if (command.handler is None) == (command.app is None):
        parser.error("give a handler (package.module:function) or --app package.module:app")
    if command.handler is not None and ":" not in command.handler:
        parser.error(f"handler {command.handler!r} is not of the form package.module:function")
    if command.app is not None and ":" not in command.app:
        parser.error(f"--app {command.app!r} is not of the form package.module:app")
    if command.app is not None and given["retry_failures"]:
        parser.error("--retry-failures does not go with --app: give functions retry_on")
    if given["weights"] and given["polling"] != "weighted":
        parser.error("--weight needs --polling weighted")
    try:
        credentials = Credentials.from_environment(environ)
    except ValueError as error:
        parser.error(str(error))
    provisioner_id, worker_type = given.pop("provisioner_id"), given.pop("worker_type")
    try:
        task_queues = (
            task_queues_of(provisioner_id, worker_type, given["task_queues"])
            # an app knows its functions' task queues; --task-queue narrows them
            if command.app is None or given["task_queues"] or provisioner_id or worker_type
            else ()
        )
    except ValueError as error:
        parser.error(f"{error}: give --task-queue, or --provisioner-id and --worker-type")
    try:
        worker = WorkerOptions(
            **{
                **given,
                "root_urls": tuple(root_urls),
                "credentials": credentials,
                "task_queues": task_queues,
                "weights": weights_with(given["weights"] or {}),
                "worker_group": given["worker_group"] or default_worker_group(),
                "worker_id": given["worker_id"] or default_worker_id(),
            }
        )
    except ValueError as error:
        parser.error(str(error))
    return Options(worker=worker, command=command)


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
    command = options.command
    # The coordinator's format, so both logs read (and parse) alike.
    console = logging.StreamHandler()
    console.setFormatter(KeyValueFormatter())
    logging.basicConfig(level=command.log_level, handlers=[console])
    lean_log_records()
    # Console scripts don't put the current directory on sys.path; handlers usually live there.
    sys.path.insert(0, os.getcwd())
    task_queues = options.worker.task_queues
    try:
        if command.app is not None:
            handler: Handler = ServedApp(spec=command.app)
            task_queues = task_queues or load_app(command.app).task_queues
        else:
            assert command.handler is not None
            handler = load_handler(command.handler)
    except (ImportError, AttributeError, TypeError, ValueError) as error:
        what = f"app {command.app}" if command.app is not None else f"handler {command.handler}"
        print(f"queue-worker: cannot load {what}: {error}", file=sys.stderr)
        return 2
    if command.processes > 1:
        assert options.worker.worker_id is not None  # parse_options fills it in
        supervisor = Supervisor(
            argv=argv,
            processes=command.processes,
            worker_id=options.worker.worker_id,
            metrics_port=options.worker.metrics_port,
        )
        return asyncio.run(supervisor.run())
    try:
        worker = Worker(handler=handler, options=options.worker, task_queues=task_queues)
    except ValueError as error:  # an SSL_CERT_FILE that cannot be loaded, say
        print(f"queue-worker: {error}", file=sys.stderr)
        return 2
    supervisor_pid = os.environ.get(SUPERVISOR_ENV)
    # As the coordinator does once serving: the modules loaded so far (the handler's too) are
    # frozen out of later collections, and the youngest generation is collected less often,
    # so that the collector's pauses do not delay the start of runs.
    gc.freeze()
    gc.set_threshold(GC_YOUNGEST_THRESHOLD, *gc.get_threshold()[1:])
    glibc_malloc.keep_heap_flat()
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
