"""A worker's options, each spelled once: :class:`WorkerOptions`.

Each option is one field, which carries its default and, when ``queue-worker`` takes it, its
:class:`Flag` (the flag's name, its help, how its text is read, the environment variable read
when it is not given); an option only ``Worker`` takes says what it means in its docstring.
``Worker(**options)`` builds one, ``queue-worker`` builds its argument parser by walking the
fields (:func:`add_flags`, as arq reads its settings from one class), and a unit test checks
the options table of docs/worker-sdk.md against them; so a new option is one field here, and
the code that uses it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from hawk_signing import Credentials
from worker_sdk.priorities import DEFAULT_WEIGHTS, POLLINGS, Polling, TaskQueue, weights_with
from worker_sdk.timing import Backoff

Isolation = Literal["none", "process"]
ISOLATIONS: tuple[Isolation, ...] = ("none", "process")


@dataclass(frozen=True, kw_only=True)
class Flag:
    """How ``queue-worker`` takes an option: ``name`` is its flag (``--capacity``), or, without
    the dashes, its optional positional argument; ``parse`` reads its text; ``action`` is
    argparse's (``append`` for a repeatable flag); ``env`` names the environment variable read
    when the flag is not given. ``%(default)s`` in ``help`` is the field's default."""

    name: str
    help: str
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: Sequence[str] | None = None
    action: str | type[argparse.Action] = "store"
    env: str | None = None


def cli(flag: Flag) -> dict[str, Any]:
    """The metadata of an options dataclass's field that ``queue-worker`` takes as ``flag``."""
    return {"flag": flag}


def flag_of(option_field: dataclasses.Field[Any]) -> Flag | None:
    flag: Flag | None = option_field.metadata.get("flag")
    return flag


def parsed_default(option_field: dataclasses.Field[Any], flag: Flag) -> Any:
    """What the parser holds for a flag not given: the field's default (a fresh list for a
    repeatable flag, which argparse appends to)."""
    default = option_field.default
    return list(cast(Iterable[Any], default)) if flag.action == "append" else default


def add_flags(parser: argparse.ArgumentParser, options: type[Any]) -> None:
    """Add the flag of every field of the ``options`` dataclass that has one; each parses into
    the attribute of the field's name, the field's default when not given."""
    for option_field in dataclasses.fields(options):
        flag = flag_of(option_field)
        if flag is None:
            continue
        keywords: dict[str, Any] = {
            "help": flag.help,
            "default": parsed_default(option_field, flag),
        }
        if flag.action != "store":
            keywords["action"] = flag.action
        if flag.parse is not None:
            keywords["type"] = flag.parse
        for name in ("metavar", "choices"):
            if getattr(flag, name) is not None:
                keywords[name] = getattr(flag, name)
        if flag.name.startswith("-"):
            parser.add_argument(flag.name, dest=option_field.name, **keywords)
        else:
            parser.add_argument(option_field.name, nargs="?", **keywords)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _skip(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must not be negative, not {value}")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError("must be a finite number of seconds")
    return value


def _run_time(text: str) -> float:
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def _rate(text: str) -> float:
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def _root_url(text: str) -> str:
    """A root URL as given, checked, without its trailing slash."""
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


class _Weights(argparse.Action):
    """``--weight PRIORITY=WEIGHT``, repeated, into one mapping."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        priority, weight = values
        setattr(namespace, self.dest, {**(getattr(namespace, self.dest) or {}), priority: weight})


_DEFAULT_WEIGHTS_TEXT = ", ".join(f"{p}={w:g}" for p, w in DEFAULT_WEIGHTS.items())


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    """Every option of a :class:`~worker_sdk.worker.Worker` (its keywords besides
    ``handler``), as given, checked for what cannot work (``ValueError``)."""

    root_url: str | None = None
    """The coordinator's root URL (or ``root_urls``)."""
    root_urls: Sequence[str] = field(
        default=(),
        metadata=cli(
            Flag(
                name="--root-url",
                action="append",
                parse=_root_url,
                metavar="URL",
                env="TASKCLUSTER_ROOT_URL",
                help="coordinator root URL (default: $TASKCLUSTER_ROOT_URL); repeat it for "
                "replicas of one coordinator, in order of preference: the worker fails over to "
                "the next while one does not answer",
            ),
        ),
    )
    credentials: Credentials | Mapping[str, Any] | None
    """What signs the requests (a ``Credentials``, or its JSON form); ``None`` sends them
    unsigned. ``queue-worker`` reads ``TASKCLUSTER_CLIENT_ID``, ``TASKCLUSTER_ACCESS_TOKEN``
    and ``TASKCLUSTER_CERTIFICATE``."""
    provisioner_id: str | None = field(
        default=None,
        metadata=cli(
            Flag(name="--provisioner-id", help="with --worker-type: a task queue"),
        ),
    )
    worker_type: str | None = field(
        default=None,
        metadata=cli(
            Flag(name="--worker-type", help="with --provisioner-id: a task queue"),
        ),
    )
    task_queues: Iterable[str | TaskQueue] = field(
        default=(),
        metadata=cli(
            Flag(
                name="--task-queue",
                action="append",
                parse=_task_queue,
                metavar="PROVISIONER/WORKERTYPE",
                help="a task queue to take tasks from (repeat for more)",
            ),
        ),
    )
    polling: Polling = field(
        default="strict",
        metadata=cli(
            Flag(
                name="--polling",
                choices=POLLINGS,
                help="strict: highest priority first (default: %(default)s); weighted: each "
                "priority gets a share of the claims by its weight",
            ),
        ),
    )
    weights: Mapping[str, float] | None = field(
        default=None,
        metadata=cli(
            Flag(
                name="--weight",
                action=_Weights,
                parse=_weight,
                metavar="PRIORITY=WEIGHT",
                help="with --polling weighted: a priority's weight (repeatable; defaults: "
                f"{_DEFAULT_WEIGHTS_TEXT})",
            ),
        ),
    )
    worker_group: str | None = field(
        default=None,
        metadata=cli(
            Flag(name="--worker-group", help="default: the short host name"),
        ),
    )
    worker_id: str | None = field(
        default=None,
        metadata=cli(
            Flag(name="--worker-id", help="default: host name and process id"),
        ),
    )
    capacity: int = field(
        default=1,
        metadata=cli(
            Flag(name="--capacity", parse=positive_int, help="tasks at once"),
        ),
    )
    claim_work: bool | None = field(
        default=None,
        metadata=cli(
            Flag(
                name="--claim-work",
                action="store_true",
                help="claim through the coordinator's claimWork instead of polling Azure (without "
                "it: Azure, unless the coordinator dispatches from its store, then claimWork)",
            ),
        ),
    )
    grace_period: float = field(
        default=60.0,
        metadata=cli(
            Flag(
                name="--grace-period",
                parse=float,
                help="seconds running tasks get to finish after SIGTERM/SIGINT (default: "
                "%(default)g)",
            ),
        ),
    )
    dequeue_warning: int = field(
        default=10,
        metadata=cli(
            Flag(
                name="--dequeue-warning",
                parse=int,
                help="warn about hints dequeued more often than this (default: %(default)s)",
            ),
        ),
    )
    idle_delay: float = 1.0
    """Seconds to pause when there is no work (jittered), the first step of the idle backoff."""
    idle_rate: float = field(
        default=1.0,
        metadata=cli(
            Flag(
                name="--idle-rate",
                parse=_rate,
                metavar="REQUESTS_PER_SECOND",
                help="Azure requests a second, on average, that a worker finding no work backs off "
                "to: its pause doubles from 1 s with each empty pass until then (default: "
                "%(default)g)",
            ),
        ),
    )
    backoff: Backoff = field(default_factory=Backoff)
    """The jittered exponential schedule after transient errors."""
    retry_failures: bool = field(
        default=False,
        metadata=cli(
            Flag(
                name="--retry-failures",
                action="store_true",
                help="report a handler's exceptions intermittent-task (retried) while the task has "
                "retries left, failed on its last run",
            ),
        ),
    )
    isolation: Isolation = field(
        default="none",
        metadata=cli(
            Flag(
                name="--isolation",
                choices=ISOLATIONS,
                help="process: run each task's handler in one of a pool of --capacity child "
                "processes (default: %(default)s)",
            ),
        ),
    )
    max_run_time: float | None = field(
        default=None,
        metadata=cli(
            Flag(
                name="--max-run-time",
                parse=_run_time,
                metavar="SECONDS",
                help="stop a handler that runs longer (cancelled; with --isolation process its "
                "process is ended) and report its run failed, not retried (default: no limit)",
            ),
        ),
    )
    max_runs_per_child: int | None = field(
        default=None,
        metadata=cli(
            Flag(
                name="--max-runs-per-child",
                parse=positive_int,
                metavar="N",
                help="with --isolation process: replace a child process after N runs (default: "
                "never)",
            ),
        ),
    )
    handle_signals: bool = True
    """Stop gracefully on SIGTERM and SIGINT (needs the main thread)."""
    metrics_port: int | None = field(
        default=None,
        metadata=cli(
            Flag(
                name="--metrics-port",
                parse=positive_int,
                help="serve Prometheus metrics on this port (with --processes N, child i on "
                "port+i)",
            ),
        ),
    )
    metrics_host: str = field(
        default="127.0.0.1",
        metadata=cli(
            Flag(
                name="--metrics-host",
                metavar="ADDRESS",
                help="with --metrics-port: the address the metrics are served on (default: "
                "%(default)s, this machine only; 0.0.0.0 for every interface)",
            ),
        ),
    )
    batching: bool = field(
        default=True,
        metadata=cli(
            Flag(
                name="--no-batching",
                action="store_false",
                help="one request per claim, reclaim and report, instead of claimRuns, reclaimRuns "
                "and resolveRuns for many runs at once (a coordinator without them is detected "
                "anyway)",
            ),
        ),
    )
    empty_queue_skip: float = field(
        default=1.0,
        metadata=cli(
            Flag(
                name="--empty-queue-skip",
                parse=_skip,
                metavar="SECONDS",
                help="poll an Azure queue that answered empty again only after half to all of "
                "this, which bounds how long a higher priority's new work may wait (default: "
                "%(default)g; 0: never skip)",
            ),
        ),
    )
    polls_in_flight: int = field(
        default=2,
        metadata=cli(
            Flag(
                name="--polls-in-flight",
                parse=positive_int,
                metavar="N",
                help="Azure gets (with their claims) at once, each for its share of the capacity, "
                "so the next get goes out while the last one's hints are claimed (default: "
                "%(default)s)",
            ),
        ),
    )
    run_log: bool = field(
        default=True,
        metadata=cli(
            Flag(
                name="--no-run-log",
                action="store_false",
                help="do not upload each run's log (what its handler logged, and its traceback) "
                "as the artifact public/logs/live_backing.log",
            ),
        ),
    )

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {self.capacity}")
        if not 0 < self.idle_rate < math.inf:
            raise ValueError(f"idle_rate must be a positive number, not {self.idle_rate}")
        if self.polls_in_flight < 1:
            raise ValueError(f"polls_in_flight must be at least 1, not {self.polls_in_flight}")
        if self.grace_period < 0:
            raise ValueError(f"grace_period must not be negative, not {self.grace_period}")
        if not 0 <= self.empty_queue_skip < math.inf:
            # an infinite skip would never poll a queue again once it was empty
            raise ValueError(
                f"empty_queue_skip must be finite and not negative, not {self.empty_queue_skip}"
            )
        if self.polling not in POLLINGS:
            raise ValueError(f"polling must be strict or weighted, not {self.polling!r}")
        if self.isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be none or process, not {self.isolation!r}")
        if self.max_run_time is not None and not 0 < self.max_run_time < math.inf:
            raise ValueError(
                f"max_run_time must be a positive number of seconds, not {self.max_run_time}"
            )
        if self.max_runs_per_child is not None and self.isolation != "process":
            raise ValueError("max_runs_per_child needs isolation='process'")
