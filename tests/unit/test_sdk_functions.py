"""Tasks as Python functions without I/O: the call payload (worker_sdk.calls), a function's
options and retry decisions (worker_sdk.task_options), result.json and TaskFailed
(worker_sdk.results), the definitions an App writes, and ``queue-worker --app``'s options."""

from __future__ import annotations

import json
import math
import pickle
import re
from datetime import UTC, datetime, timedelta
from inspect import signature
from typing import Any, Literal

import pytest

from worker_sdk import (
    App,
    DispatchRefused,
    MalformedPayload,
    RequestFailed,
    RetryTask,
    TaskFailed,
    TaskQueue,
    TaskRun,
    cli,
    serving,
)
from worker_sdk.calls import FunctionCall, bind, decode_call, encode_call, function_name
from worker_sdk.results import error_body, outcome, task_failed, value_body
from worker_sdk.runs import run_from_json
from worker_sdk.task_options import TaskOptions


def greet(name: str, *, punctuation: str = "!") -> str:
    return f"hello {name}{punctuation}"


# -- calls -----------------------------------------------------------------------------------


def test_a_call_is_encoded_as_the_payload_and_decoded_back() -> None:
    call = encode_call(function_name(greet), signature(greet), ("ada",), {"punctuation": "?"})
    payload = call.payload()
    assert payload == {
        "function": f"{__name__}:greet",
        "args": ["ada"],
        "kwargs": {"punctuation": "?"},
    }
    decoded = decode_call(json.loads(json.dumps(payload)))
    assert decoded == FunctionCall(
        function=f"{__name__}:greet", args=("ada",), kwargs={"punctuation": "?"}
    )
    assert greet(*bind(decoded, greet).args, **bind(decoded, greet).kwargs) == "hello ada?"


def test_tuples_are_json_lists_and_nested_values_are_checked() -> None:
    call = encode_call("f", signature(lambda value: value), ({"a": (1, [2.5, None, True])},), {})
    assert json.loads(json.dumps(call.payload()))["args"] == [{"a": [1, [2.5, None, True]]}]
    with pytest.raises(TypeError, match=r"f: argument value\['a'\]\[1\]\[0\] is a bytes"):
        encode_call("f", signature(lambda value: value), ({"a": (1, [b"x"])},), {})
    with pytest.raises(TypeError, match="argument value is inf, which JSON cannot hold"):
        encode_call("f", signature(lambda value: value), (math.inf,), {})


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([], "not a function call"),
        ({"function": 3}, "not a function call"),
        ({"function": "m:f", "args": "x"}, '"args" is not a list'),
        ({"function": "m:f", "kwargs": []}, '"kwargs" is not an object'),
        ({"function": "m:f", "extra": 1}, "fields no function call has: ['extra']"),
    ],
)
def test_a_payload_that_is_no_call_is_malformed(payload: Any, message: str) -> None:
    with pytest.raises(MalformedPayload, match=re.escape(message)):
        decode_call(payload)


def test_arguments_that_do_not_bind_on_the_worker_are_malformed() -> None:
    call = FunctionCall(function="m:greet", args=(), kwargs={"nom": "x"})
    with pytest.raises(MalformedPayload, match=r"do not bind to m:greet\(name: 'str'"):
        bind(call, greet)


# -- options and retry decisions -------------------------------------------------------------


def test_options_write_the_definitions_fields() -> None:
    options = TaskOptions(
        priority="high", retries=2, retry_delay=3, retry_priority="low", claim_timeout=60
    )
    assert options.definition_fields() == {
        "priority": "high",
        "retries": 2,
        "retryDelay": {"schedule": [3]},
        "retryPriority": "low",
        "claimTimeout": 60,
    }
    assert TaskOptions().definition_fields() == {}


@pytest.mark.parametrize(
    "options",
    [
        {"priority": "urgent"},
        {"retry_priority": "meh"},
        {"retries": -1},
        {"claim_timeout": 29},
        {"retry_delay": -1},
        {"max_run_time": 0},
    ],
)
def test_options_out_of_range_are_refused_at_registration(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(options))):
        TaskOptions(**options)
    with pytest.raises(TypeError, match="retry_on must list exception classes"):
        TaskOptions(retry_on=("ValueError",))  # type: ignore[arg-type]


def test_app_task_takes_every_task_option_as_a_keyword_and_refuses_others() -> None:
    app = App(root_url="http://c", credentials=None, task_queue="p/default")

    @app.task(task_queue="p/other", retries=4, retry_on=[ValueError], max_run_time=9)
    def job() -> None:
        pass

    assert job.options == TaskOptions(
        task_queue=TaskQueue("p", "other"), retries=4, retry_on=(ValueError,), max_run_time=9
    )
    with pytest.raises(TypeError, match="retires"):
        app.task(retires=4)


def test_without_a_policy_nothing_is_retried() -> None:
    assert TaskOptions().retry_for(ValueError("x"), retry_count=0) is None


def test_retries_alone_retry_any_exception() -> None:
    retry = TaskOptions(retries=2).retry_for(ValueError("x"), retry_count=0)
    assert isinstance(retry, RetryTask) and str(retry) == "ValueError: x"
    narrowed = TaskOptions(retries=2, retry_on=(ConnectionError,))
    assert narrowed.retry_for(ValueError("x"), retry_count=0) is None


def test_retry_on_retries_only_its_exceptions_with_the_tasks_own_delay() -> None:
    options = TaskOptions(retry_on=(ConnectionError,))
    retry = options.retry_for(ConnectionResetError("reset"), retry_count=0)
    assert isinstance(retry, RetryTask) and retry.retry_after is None
    assert str(retry) == "ConnectionResetError: reset"
    assert options.retry_for(ValueError("x"), retry_count=0) is None


def test_retry_with_decides_the_delay_counting_from_0() -> None:
    asked: list[int] = []

    def block(error: BaseException, retry_count: int) -> float | Literal[False] | None:
        asked.append(retry_count)
        return [10.0, None, False][retry_count]

    options = TaskOptions(retry_with=block)
    first = options.retry_for(ValueError("x"), retry_count=0)
    assert first is not None and first.retry_after == 10.0
    second = options.retry_for(ValueError("x"), retry_count=1)
    assert second is not None and second.retry_after is None  # the task's retry policy
    assert options.retry_for(ValueError("x"), retry_count=2) is None  # give up: failed
    assert asked == [0, 1, 2]
    # with retry_on, only its exceptions reach the block
    narrowed = TaskOptions(retry_on=(KeyError,), retry_with=block)
    assert narrowed.retry_for(ValueError("x"), retry_count=0) is None


@pytest.mark.parametrize("answer", [True, -1, math.inf, "10", [1]])
def test_a_retry_block_answering_nonsense_is_a_type_error(answer: Any) -> None:
    options = TaskOptions(retry_with=lambda error, count: answer)
    with pytest.raises(TypeError, match="retry_with answered"):
        options.retry_for(ValueError("x"), retry_count=0)


# -- results ---------------------------------------------------------------------------------


def test_result_json_holds_the_value_or_the_error() -> None:
    assert outcome(value_body({"a": [1]})) == {"value": {"a": [1]}}
    with pytest.raises(TypeError, match="the return value is not JSON"):
        value_body({1, 2})
    with pytest.raises(TypeError, match="the return value is not JSON"):
        value_body(math.nan)
    try:
        raise KeyError("missing")
    except KeyError as error:
        body = outcome(error_body(error))
    assert body["error"]["type"] == "builtins.KeyError"
    assert body["error"]["message"] == "'missing'"
    assert 'raise KeyError("missing")' in body["error"]["traceback"]
    with pytest.raises(ValueError, match="neither a value nor an error"):
        outcome(b'{"other": 1}')


def test_task_failed_carries_the_remote_error_or_says_how_the_task_ended() -> None:
    status = {"state": "failed", "runs": [{"runId": 0, "reasonResolved": "failed"}]}
    error = {"error": {"type": "builtins.ValueError", "message": "bad", "traceback": "Tb"}}
    failed = task_failed("T", status, error)
    assert isinstance(failed, TaskFailed)
    assert (failed.type, failed.message, failed.traceback) == ("builtins.ValueError", "bad", "Tb")
    assert str(failed) == "task T ended failed/failed: builtins.ValueError: bad"
    canceled = {"state": "exception", "runs": [{"runId": 0, "reasonResolved": "canceled"}]}
    plain = task_failed("T", canceled, None)
    assert (plain.type, plain.reason, plain.traceback) == (None, "canceled", None)
    assert "recorded no error" in str(plain)


# -- the App's definitions and options ---------------------------------------------------------


def test_from_env_reads_the_taskcluster_variables() -> None:
    app = App.from_env(
        task_queue="p/w",
        environ={
            "TASKCLUSTER_ROOT_URL": "http://c:8080/",
            "TASKCLUSTER_CLIENT_ID": "me",
            "TASKCLUSTER_ACCESS_TOKEN": "secret",
        },
    )
    assert app.connection.root_urls == ("http://c:8080",)
    assert app.connection.credentials is not None
    assert app.connection.credentials.client_id == "me"
    assert app.task_queue == TaskQueue("p", "w")
    with pytest.raises(ValueError, match="TASKCLUSTER_ROOT_URL"):
        App.from_env(task_queue="p/w", environ={})
    with pytest.raises(
        ValueError, match="TASKCLUSTER_CLIENT_ID is set but TASKCLUSTER_ACCESS_TOKEN is not"
    ):
        App.from_env(
            task_queue="p/w",
            environ={"TASKCLUSTER_ROOT_URL": "http://c", "TASKCLUSTER_CLIENT_ID": "me"},
        )


def test_registering_keeps_the_function_callable_and_names_unique() -> None:
    app = App(root_url="http://c", credentials=None, task_queue="p/w")
    registered = app.task(greet)
    assert registered("bob") == "hello bob!"
    assert registered.name == f"{__name__}:greet"
    with pytest.raises(ValueError, match="already registered"):
        app.task(greet)
    assert list(app.functions) == [f"{__name__}:greet"]


def test_a_definition_counts_its_deadline_from_when_the_task_may_run() -> None:
    app = App(
        root_url="http://c",
        credentials=None,
        task_queue="p/w",
        deadline=timedelta(hours=2),
        expires=timedelta(days=7),
        owner="me@example.com",
        source="https://example.com/app",
    )
    registered = app.task(retries=1)(greet)
    now = datetime(2026, 5, 1, 12, tzinfo=UTC)
    later = now + timedelta(hours=1)
    body = registered._definition(now=now, not_before=later, priority=None, dependencies=["D1"])
    assert body["created"] == "2026-05-01T12:00:00.000Z"
    assert body["notBefore"] == "2026-05-01T13:00:00.000Z"
    assert body["deadline"] == "2026-05-01T15:00:00.000Z"
    assert body["expires"] == "2026-05-08T15:00:00.000Z"
    assert body["metadata"]["owner"] == "me@example.com"
    assert (body["retries"], body["dependencies"], body["taskQueueId"]) == (1, ["D1"], "p/w")


# -- queue-worker --app --------------------------------------------------------------------


def test_app_option_needs_no_task_queue_and_excludes_a_handler() -> None:
    options = cli.parse_options(["--root-url", "http://c", "--app", "examples.tasks_app:app"], {})
    assert (options.command.app, options.command.handler, options.worker.task_queues) == (
        "examples.tasks_app:app",
        None,
        (),
    )
    narrowed = cli.parse_options(
        ["--root-url", "http://c", "--task-queue", "p/w", "--app", "m:app"], {}
    )
    assert narrowed.worker.task_queues == (TaskQueue("p", "w"),)
    for argv in (
        ["--app", "m:app", "m:handler"],
        ["--app", "no-colon"],
        ["--app", "m:app", "--retry-failures"],
        [],
    ):
        with pytest.raises(SystemExit) as exit_info:
            cli.parse_options(["--root-url", "http://c", *argv], {})
        assert exit_info.value.code == 2


def test_load_app_refuses_what_is_no_app_with_functions() -> None:
    with pytest.raises(TypeError, match=r"not a worker_sdk\.App"):
        cli.load_app("worker_sdk.timing:jittered")


def test_the_app_handler_travels_by_name_to_handler_processes() -> None:
    handler = cli.ServedApp(spec="examples.tasks_app:app")
    assert pickle.loads(pickle.dumps(handler)) == handler
    app = App(root_url="http://c", credentials=None, task_queue="p/w")
    app.task(greet)
    with pytest.raises(ValueError, match=r"queue-worker --app package\.module:app --isolation"):
        app.worker(isolation="process")


def claimed_run(*, deadline_in: timedelta, retries: int = 5, retries_left: int = 5) -> TaskRun:
    """A run as a handler process would get it, of a task whose deadline is that far off."""
    now = datetime.now(UTC)
    run, _ = run_from_json(
        json.dumps(
            {
                "taskId": "T",
                "runId": 0,
                "task": {"deadline": (now + deadline_in).isoformat(), "retries": retries},
                "takenUntil": (now + timedelta(minutes=20)).isoformat(),
                "retriesLeft": retries_left,
                "credentials": {"clientId": "c", "accessToken": "t"},
                "rootUrls": ["http://c"],
                "backoff": {"base": 0.1, "cap": 1.0},
            }
        )
    )
    return run


def test_a_retry_block_delay_past_the_deadline_fails_the_run_instead() -> None:
    options = TaskOptions(retry_with=lambda error, count: 120.0)
    call = FunctionCall(function="m:f", args=(), kwargs={})
    error = ValueError("x")
    within = serving._report_for(claimed_run(deadline_in=timedelta(hours=1)), call, options, error)
    assert isinstance(within, RetryTask) and within.retry_after == 120.0
    past = serving._report_for(claimed_run(deadline_in=timedelta(seconds=60)), call, options, error)
    assert past is error


def test_a_partly_refused_dispatch_many_keeps_the_handles_it_created() -> None:
    app = App(root_url="http://c", credentials=None, task_queue="p/w")
    created = [app.handle("A"), app.handle("C")]
    error = DispatchRefused(
        url="http://c/api/queue/v1/tasks",
        refusals={3: {"code": "InputError", "message": "later"}, 1: {"code": "X", "message": "no"}},
        created=created,
        total=4,
    )
    assert isinstance(error, RequestFailed) and error.status == 400
    assert (error.code, error.created) == ("X", created)
    assert "2 of 4 tasks refused; call 1: no" in str(error)
