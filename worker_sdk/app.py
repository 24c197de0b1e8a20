"""Tasks as Python functions (SPEC §22): :class:`App`, ``@app.task`` and :class:`TaskFunction`.

A producer dispatches a call of a registered function as a task; a worker started with
``queue-worker --app module:app`` (or ``await app.worker().run()``) runs it::

    from worker_sdk import App

    app = App.from_env(task_queue="proj/default")

    @app.task(retries=3, retry_on=(ConnectionError,), max_run_time=60)
    async def add(x: int, y: int) -> int:
        return x + y

    handle = await add.dispatch(2, 3, wait=10)  # a task, claimable in 10 s
    assert await handle.result(timeout=60) == 5

``dispatch`` writes the task definition: the function's task queue (``task_queue=`` of
``@app.task``, else the app's), ``created`` now, ``deadline`` the app's ``deadline`` after
it may first run (one day by default), ``expires`` when the app says (else the
coordinator's default, a year after the deadline), ``metadata`` (the function's name, the
app's ``owner`` and ``source``), the function's defaults (:class:`TaskOptions`) and the
payload of the call (:mod:`worker_sdk.calls`). Arguments are checked against the function's
signature and for JSON at dispatch, so a bad call is a :class:`TypeError` there. The
coordinator is reached through the app's :class:`~worker_sdk.connection.Connection`: the
``_sync`` forms are for code without an event loop.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, ParamSpec, TypeVar, overload

import slugid

from hawk_signing import Credentials
from worker_sdk import tracing
from worker_sdk.artifacts import expires_text
from worker_sdk.calls import FunctionCall, encode_call, function_name
from worker_sdk.client import root_urls_of
from worker_sdk.connection import Connection, blocking_form
from worker_sdk.errors import RequestFailed
from worker_sdk.handles import TaskHandle
from worker_sdk.inbox import enqueue_in, enqueue_in_sync
from worker_sdk.priorities import PRIORITIES, TaskQueue
from worker_sdk.runs import TaskRun
from worker_sdk.serving import serve
from worker_sdk.task_options import TaskOptions
from worker_sdk.worker import Worker

_P = ParamSpec("_P")
_R = TypeVar("_R")

CREATE_TASKS_BATCH = 1_000
"""Tasks per createTasks request (the coordinator's limit)."""

DEFAULT_OWNER = "worker-sdk@example.com"
DEFAULT_SOURCE = "https://example.com/worker-sdk"
"""``metadata.owner`` and ``metadata.source`` of an app that does not name its own."""

Wait = float | timedelta
"""``wait=``: seconds, or a timedelta."""


class DispatchRefused(RequestFailed):
    """``dispatch_many`` created some tasks, and the coordinator refused the others.

    ``refusals`` maps the index of each refused call to the coordinator's error (``code``,
    ``message``); ``created`` holds the handles of the tasks that were created, in call
    order. The message names the first refusal.
    """

    def __init__(
        self,
        *,
        url: str,
        refusals: Mapping[int, Mapping[str, Any]],
        created: list[TaskHandle],
        total: int,
    ) -> None:
        first, error = min(refusals.items())
        super().__init__(
            method="PUT",
            url=url,
            status=400,
            code=str(error.get("code", "")),
            message=f"{len(refusals)} of {total} tasks refused; call {first}: "
            f"{error.get('message', '')}",
        )
        self.refusals = dict(refusals)
        self.created = created


class App:
    """Functions registered as tasks, and where and how their tasks are created.

    :param root_url: the coordinator (or ``root_urls``, replicas of one, as for
        :class:`~worker_sdk.worker.Worker`).
    :param credentials: sign createTask, cancelTask and the reads of ``result.json`` (which
        need ``queue:create-task:<priority>:<taskQueueId>``, ``queue:cancel-task:...`` and
        ``queue:get-artifact:result.json``); ``None`` sends them unsigned.
    :param task_queue: ``provisionerId/workerType`` of functions that name none.
    :param deadline: how long after it may first run a task is given (default one day).
    :param expires: how long after its deadline a task is kept (default: the coordinator's).
    :param owner: ``metadata.owner`` of the tasks (an e-mail address).
    :param source: ``metadata.source`` of the tasks (a URL).
    """

    def __init__(
        self,
        *,
        root_url: str | None = None,
        root_urls: Sequence[str] = (),
        credentials: Credentials | Mapping[str, Any] | None,
        task_queue: str | TaskQueue,
        deadline: timedelta = timedelta(days=1),
        expires: timedelta | None = None,
        owner: str = DEFAULT_OWNER,
        source: str = DEFAULT_SOURCE,
    ) -> None:
        if deadline <= timedelta(0):
            raise ValueError(f"deadline must be after the task may run, not {deadline}")
        self.connection = Connection(
            root_urls=root_urls_of(root_url, root_urls),
            credentials=credentials
            if credentials is None or isinstance(credentials, Credentials)
            else Credentials.from_json(credentials),
        )
        self.task_queue = _task_queue(task_queue)
        self.deadline = deadline
        self.expires = expires
        self.owner = owner
        self.source = source
        self._functions: dict[str, TaskFunction[..., Any]] = {}

    @classmethod
    def from_env(
        cls,
        *,
        task_queue: str | TaskQueue,
        environ: Mapping[str, str] | None = None,
        **options: Any,
    ) -> App:
        """An app of the coordinator at ``TASKCLUSTER_ROOT_URL`` with the credentials of
        ``TASKCLUSTER_CLIENT_ID`` and ``TASKCLUSTER_ACCESS_TOKEN`` (and
        ``TASKCLUSTER_CERTIFICATE``), as ``queue-worker`` and the official clients read
        them; ``options`` are the other parameters of :class:`App`.

        :raises ValueError: the root URL is missing, or only one of the two credentials is
            set.
        """
        environ = os.environ if environ is None else environ
        root_url = environ.get("TASKCLUSTER_ROOT_URL")
        if not root_url:
            raise ValueError("set TASKCLUSTER_ROOT_URL to the coordinator's root URL")
        credentials = Credentials.from_environment(environ)
        return cls(root_url=root_url, credentials=credentials, task_queue=task_queue, **options)

    @overload
    def task(self, function: Callable[_P, _R], /) -> TaskFunction[_P, _R]: ...

    @overload
    def task(
        self, function: None = None, /, *, name: str | None = None, **options: Any
    ) -> Callable[[Callable[_P, _R]], TaskFunction[_P, _R]]: ...

    def task(
        self,
        function: Callable[_P, _R] | None = None,
        /,
        *,
        name: str | None = None,
        **options: Any,
    ) -> TaskFunction[_P, _R] | Callable[[Callable[_P, _R]], TaskFunction[_P, _R]]:
        """Register a function (``async def`` or plain) as a task, with its defaults: the
        keywords are the fields of :class:`~worker_sdk.task_options.TaskOptions` (``task_queue``
        may be a ``provisionerId/workerType`` string, ``retry_on`` any iterable); as
        ``@app.task`` or ``@app.task(...)``. ``name`` replaces ``<module>:<qualified name>`` as
        what the payload calls it by (needed for a function of a module run as ``__main__``).

        :raises ValueError: an option is out of range, or the name is taken.
        :raises TypeError: a keyword is no option.
        """
        if options.get("task_queue") is not None:
            options["task_queue"] = _task_queue(options["task_queue"])
        if "retry_on" in options:
            options["retry_on"] = tuple(options["retry_on"])
        task_options = TaskOptions(**options)

        def register(function: Callable[_P, _R]) -> TaskFunction[_P, _R]:
            registered = TaskFunction(
                app=self,
                function=function,
                name=name or function_name(function),
                options=task_options,
            )
            if registered.name in self._functions:
                raise ValueError(f"a function named {registered.name} is already registered")
            self._functions[registered.name] = registered
            return registered

        return register if function is None else register(function)

    @property
    def functions(self) -> Mapping[str, TaskFunction[..., Any]]:
        """The registered functions, by the name their payloads call them by."""
        return dict(self._functions)

    @property
    def task_queues(self) -> tuple[TaskQueue, ...]:
        """The task queues the registered functions' tasks go to, each once."""
        queues = (f.options.task_queue or self.task_queue for f in self._functions.values())
        return tuple(dict.fromkeys(queues))

    def handle(self, task_id: str) -> TaskHandle:
        """The handle of a task dispatched earlier (by its id, e.g. kept in a database)."""
        return TaskHandle(task_id=task_id, connection=self.connection)

    async def serve(self, run: TaskRun) -> None:
        """The worker's handler: run the function the run's payload calls
        (:mod:`worker_sdk.serving`)."""
        await serve(run, self._functions)

    def worker(self, **options: Any) -> Worker:
        """A :class:`~worker_sdk.worker.Worker` serving every registered function from
        :attr:`task_queues`; ``options`` are its other parameters (``capacity``, ...)."""
        if not self._functions:
            raise ValueError("the app has no functions: register some with @app.task")
        if options.get("isolation") == "process":
            # its handler processes must import the app by name, which only the command knows
            raise ValueError(
                "isolation='process' serves an app from the command line: queue-worker --app "
                "package.module:app --isolation process"
            )
        return Worker(
            root_urls=self.connection.root_urls,
            credentials=self.connection.credentials,
            handler=self.serve,
            task_queues=self.task_queues,
            **options,
        )

    async def aclose(self) -> None:
        """Close the running event loop's connection (the async forms')."""
        await self.connection.aclose()

    def close(self) -> None:
        """Close the connection of the sync forms."""
        self.connection.close()

    async def __aenter__(self) -> App:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class TaskFunction(Generic[_P, _R]):
    """A function registered with ``@app.task``: call it to run it here and now, or
    dispatch it as a task.

    ``wait``, ``at``, ``priority``, ``dependencies`` and ``task_queue`` are options of
    ``dispatch``, so a function's own parameters of those names can only be passed
    positionally.
    """

    def __init__(
        self, *, app: App, function: Callable[_P, _R], name: str, options: TaskOptions
    ) -> None:
        self.app = app
        self.function = function
        self.name = name
        self.options = options
        self.signature = inspect.signature(function)
        self.__doc__ = function.__doc__
        self.__wrapped__ = function

    @property
    def connection(self) -> Connection:
        return self.app.connection

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<TaskFunction {self.name}>"

    async def dispatch(
        self,
        /,
        *args: Any,
        wait: Wait | None = None,
        at: datetime | None = None,
        priority: str | None = None,
        dependencies: Iterable[TaskHandle | str] = (),
        key: str | None = None,
        deduplication_ttl: Wait | None = None,
        concurrency_key: str | None = None,
        task_queue: str | TaskQueue | None = None,
        **kwargs: Any,
    ) -> TaskHandle:
        """Create one task calling the function with ``args`` and ``kwargs``.

        :param wait: not claimable before this long from now (the task's ``notBefore``).
        :param at: not claimable before then (an aware datetime); not with ``wait``.
        :param priority: instead of the function's (or the coordinator's default).
        :param dependencies: tasks (handles or taskIds) that must complete first.
        :param key: the task's ``deduplicationKey``: while a task of the task queue with this
            key is unresolved (or resolved less than its ``deduplication_ttl`` ago), nothing
            is created and the handle returned is that task's.
        :param deduplication_ttl: how long (seconds, or a timedelta; whole seconds, rounded
            up) the task keeps ``key`` once resolved; only with ``key``.
        :param concurrency_key: the task's ``concurrencyKey`` (a tenant, a customer): when
            its task queue has a ``maxRunningPerKey``, at most that many tasks with this key
            run at once, and the keys take turns.
        :param task_queue: instead of the function's (or the app's) task queue, for this call.
        :raises TypeError: the arguments do not bind to the function, or are not JSON.
        :raises ValueError: ``task_queue`` is not ``provisionerId/workerType``.
        :raises RequestFailed: the coordinator refused the task, or did not answer.
        """
        now = datetime.now(UTC) + await self._skew(wait, at)
        task_id, definition = self._call(
            args, kwargs, wait, at, priority, dependencies, now=now, task_queue=task_queue
        )
        definition.update(_deduplication(key, deduplication_ttl))
        if concurrency_key is not None:
            definition["concurrencyKey"] = concurrency_key
        client = self.app.connection.client()
        tracer = tracing.tracer()
        if tracer is None:
            status = await client.create_task(task_id, definition)
        else:
            task_queue_id = definition["taskQueueId"]
            with tracing.dispatching(
                tracer, "dispatch", self.name, task_queue_id, taskId=task_id
            ) as span:
                status = await client.create_task(
                    task_id, definition, traceparent=tracer.traceparent(span)
                )
        # a deduplicated dispatch is answered with the status of the task holding the key
        return self.app.handle(status.get("taskId", task_id))

    async def dispatch_in(
        self,
        connection: Any,
        /,
        *args: Any,
        client_id: str,
        schema: str | None = None,
        wait: Wait | None = None,
        at: datetime | None = None,
        priority: str | None = None,
        dependencies: Iterable[TaskHandle | str] = (),
        **kwargs: Any,
    ) -> TaskHandle:
        """:meth:`dispatch`, but as a row of the coordinator's task inbox written in
        ``connection``'s open transaction (:func:`worker_sdk.inbox.enqueue_in`): the task
        exists once, and only if, that transaction commits. ``client_id`` and ``schema`` are
        enqueue_in's; a function argument cannot be named either.

        :raises InboxUnavailable: not an asyncpg or async psycopg connection.
        """
        now = datetime.now(UTC)  # no request to the coordinator: the producer's clock
        task_id, definition = self._call(args, kwargs, wait, at, priority, dependencies, now=now)
        await enqueue_in(connection, task_id, definition, client_id=client_id, schema=schema)
        return self.app.handle(task_id)

    def dispatch_in_sync(
        self,
        connection: Any,
        /,
        *args: Any,
        client_id: str,
        schema: str | None = None,
        wait: Wait | None = None,
        at: datetime | None = None,
        priority: str | None = None,
        dependencies: Iterable[TaskHandle | str] = (),
        **kwargs: Any,
    ) -> TaskHandle:
        """:meth:`dispatch_in` on a synchronous psycopg ``Connection``."""
        now = datetime.now(UTC)  # no request to the coordinator: the producer's clock
        task_id, definition = self._call(args, kwargs, wait, at, priority, dependencies, now=now)
        enqueue_in_sync(connection, task_id, definition, client_id=client_id, schema=schema)
        return self.app.handle(task_id)

    def _call(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        wait: Wait | None,
        at: datetime | None,
        priority: str | None,
        dependencies: Iterable[TaskHandle | str],
        *,
        now: datetime,
        task_queue: str | TaskQueue | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """A new taskId and the createTask body of one call (dispatch's and dispatch_in's),
        ``wait`` counted from ``now``."""
        call = encode_call(self.name, self.signature, args, kwargs)
        definition = self._definition(
            now=now,
            not_before=_not_before(wait, at, now),
            priority=priority,
            dependencies=dependencies,
            task_queue=None if task_queue is None else _task_queue(task_queue),
        )
        definition["payload"] = call.payload()
        return slugid.nice(), definition

    async def dispatch_many(
        self,
        calls: Iterable[Sequence[Any] | Mapping[str, Any]],
        *,
        wait: Wait | None = None,
        at: datetime | None = None,
        priority: str | None = None,
        dependencies: Iterable[TaskHandle | str] = (),
    ) -> list[TaskHandle]:
        """Create one task per call, through createTasks (1,000 a request); their handles,
        in order. A call is a tuple (or list) of positional arguments, or a dict of keyword
        arguments; the options hold for every task.

        :raises TypeError: a call's arguments do not bind or are not JSON (nothing was
            created).
        :raises DispatchRefused: the coordinator refused some of the tasks; the exception
            holds the handles of those it created.
        :raises RequestFailed: a request got no answer (the tasks of earlier requests exist).
        """
        encoded = [self._encode(index, call) for index, call in enumerate(calls)]
        skew = await self._skew(wait, at)
        not_before = _not_before(wait, at, datetime.now(UTC) + skew)
        dependencies = list(dependencies)
        tracer = tracing.tracer()
        if tracer is None:
            task_ids, refused = await self._create_many(
                encoded, not_before, skew, priority, dependencies, traceparent=None
            )
        else:
            task_queue_id = str(self.options.task_queue or self.app.task_queue)
            with tracing.dispatching(
                tracer, "dispatch_many", self.name, task_queue_id, tasks=len(encoded)
            ) as span:
                task_ids, refused = await self._create_many(
                    encoded,
                    not_before,
                    skew,
                    priority,
                    dependencies,
                    traceparent=tracer.traceparent(span),
                )
        handles = [self.app.handle(task_id) for task_id in task_ids]
        if refused:
            raise DispatchRefused(
                url=self.app.connection.root_urls[0] + "/api/queue/v1/tasks",
                refusals=refused,
                created=[h for index, h in enumerate(handles) if index not in refused],
                total=len(handles),
            )
        return handles

    dispatch_sync = blocking_form(dispatch)
    dispatch_many_sync = blocking_form(dispatch_many)

    async def _create_many(
        self,
        encoded: list[FunctionCall],
        not_before: datetime | None,
        skew: timedelta,
        priority: str | None,
        dependencies: list[TaskHandle | str],
        *,
        traceparent: str | None,
    ) -> tuple[list[str], dict[int, dict[str, Any]]]:
        """dispatch_many's createTasks requests: the taskIds made, in order, and the refusals
        by index."""
        client = self.app.connection.client()
        task_ids: list[str] = []
        refused: dict[int, dict[str, Any]] = {}
        for start in range(0, len(encoded), CREATE_TASKS_BATCH):
            # one definition per request, each task with its own payload
            shared = self._definition(
                now=datetime.now(UTC) + skew,
                not_before=not_before,
                priority=priority,
                dependencies=dependencies,
            )
            batch = {
                slugid.nice(): {**shared, "payload": call.payload()}
                for call in encoded[start : start + CREATE_TASKS_BATCH]
            }
            results = await client.create_tasks(batch, traceparent=traceparent)
            refused.update(
                (start + index, result["error"])
                for index, result in enumerate(results)
                if "error" in result
            )
            task_ids.extend(batch)
        return task_ids, refused

    async def _skew(self, wait: Wait | None, at: datetime | None) -> timedelta:
        """How far the coordinator's clock is ahead of ours, when ``wait`` is given (else 0).

        ``wait`` counts on the coordinator's clock, as a worker counts ``takenUntil`` from
        the coordinator's ``Date``: a producer whose clock is off still gets the wait it
        asked for. It costs one ``ping``, only for calls with a ``wait``."""
        _not_before(wait, at, datetime.now(UTC))  # refuse bad values before any request
        if wait is None:
            return timedelta()
        return await self.app.connection.client().server_time() - datetime.now(UTC)

    def _encode(self, index: int, call: Sequence[Any] | Mapping[str, Any]) -> FunctionCall:
        if isinstance(call, Mapping):
            return encode_call(self.name, self.signature, (), call)
        if isinstance(call, list | tuple):
            return encode_call(self.name, self.signature, call, {})
        raise TypeError(
            f"{self.name}: call {index} of dispatch_many is a {type(call).__qualname__}: give "
            "a tuple of positional arguments or a dict of keyword arguments"
        )

    def _definition(
        self,
        *,
        now: datetime,
        not_before: datetime | None,
        priority: str | None,
        dependencies: Iterable[TaskHandle | str],
        task_queue: TaskQueue | None = None,
    ) -> dict[str, Any]:
        """The createTask body of a call created ``now``, but for its ``payload``."""
        if priority is not None and priority not in PRIORITIES:
            raise ValueError(f"priority {priority!r} is not one of {', '.join(PRIORITIES)}")
        if not_before is not None and not_before < now:
            not_before = None  # a time in the past means now
        deadline = (not_before or now) + self.app.deadline
        definition: dict[str, Any] = {
            "taskQueueId": str(task_queue or self.options.task_queue or self.app.task_queue),
            "created": expires_text(now),
            "deadline": expires_text(deadline),
            "metadata": {
                "name": self.name,
                "description": f"{self.name}, dispatched by worker_sdk.App",
                "owner": self.app.owner,
                "source": self.app.source,
            },
            **self.options.definition_fields(),
        }
        if self.app.expires is not None:
            definition["expires"] = expires_text(deadline + self.app.expires)
        if priority is not None:
            definition["priority"] = priority
        if not_before is not None:
            definition["notBefore"] = expires_text(not_before)
        needed = [d.task_id if isinstance(d, TaskHandle) else d for d in dependencies]
        if needed:
            definition["dependencies"] = needed
        return definition


def _task_queue(value: str | TaskQueue) -> TaskQueue:
    return value if isinstance(value, TaskQueue) else TaskQueue.parse(value)


def _deduplication(key: str | None, ttl: Wait | None) -> dict[str, Any]:
    """The ``deduplicationKey`` and ``deduplicationTtl`` that ``key`` and ``ttl`` ask for
    (the coordinator checks the key's characters and length)."""
    if key is None:
        if ttl is not None:
            raise ValueError("deduplication_ttl needs a key: give key= too, or drop it")
        return {}
    fields: dict[str, Any] = {"deduplicationKey": key}
    if ttl is not None:
        seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else ttl
        if not 0 <= seconds < math.inf:
            raise ValueError(f"deduplication_ttl must be a time from 0 on, not {ttl}")
        fields["deduplicationTtl"] = math.ceil(seconds)
    return fields


def _not_before(wait: Wait | None, at: datetime | None, now: datetime) -> datetime | None:
    """The ``notBefore`` that ``wait`` (from ``now``) or ``at`` asks for."""
    if wait is not None and at is not None:
        raise ValueError("give wait or at, not both")
    if at is not None:
        if at.tzinfo is None:
            raise ValueError(f"at {at} has no time zone: give an aware datetime")
        return at.astimezone(UTC)
    if wait is None:
        return None
    seconds = wait.total_seconds() if isinstance(wait, timedelta) else wait
    if not 0 <= seconds < math.inf:
        raise ValueError(f"wait must be a time from now on, not {wait}")
    return now + timedelta(seconds=seconds)
