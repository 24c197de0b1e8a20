"""examples/tasks_app.py and examples/tasks_producer.py tested as their users would test them:
with worker_sdk.testing's ``inline_app`` fixture, no coordinator and no worker."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

import pytest

from worker_sdk import App, TaskFailed
from worker_sdk.client import Resolution
from worker_sdk.testing import Recorder


@pytest.fixture
def tasks_app(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """examples.tasks_app, whose App.from_env needs a root URL when it is imported; inline
    mode never calls it, so any will do."""
    monkeypatch.setenv("TASKCLUSTER_ROOT_URL", "http://coordinator.invalid")
    return importlib.import_module("examples.tasks_app")


async def test_the_functions_return_what_a_worker_would_send_back(
    tasks_app: ModuleType, inline_app: Callable[[App], Recorder]
) -> None:
    recorder = inline_app(tasks_app.app)
    assert await (await tasks_app.add.dispatch(2, 3)).result() == 5
    counts = await tasks_app.word_count.dispatch_many([("the cat and the hat",), ("to be",)])
    assert [await handle.result() for handle in counts] == [
        {"the": 2, "cat": 1, "and": 1, "hat": 1},
        {"to": 1, "be": 1},
    ]
    assert recorder.calls(tasks_app.word_count) == [
        (("the cat and the hat",), {}),
        (("to be",), {}),
    ]


async def test_the_welcome_mail_retries_as_mail_retry_says(
    tasks_app: ModuleType, inline_app: Callable[[App], Recorder]
) -> None:
    recorder = inline_app(tasks_app.app)
    send = tasks_app.send_welcome_email
    assert await (await send.dispatch(7)).result() == "welcome mail sent to user 7"
    with pytest.raises(TaskFailed) as no_user:
        await (await send.dispatch(-1)).result()
    assert (no_user.value.type, no_user.value.message) == (
        "builtins.ValueError",
        "there is no user -1",
    )
    with pytest.raises(TaskFailed) as unreachable:
        await (await send.dispatch(13)).result()
    assert unreachable.value.type == "builtins.ConnectionError"
    runs = [r for r in recorder.results(send) if r.task_id == unreachable.value.task_id]
    # 1, 2 and 4 s apart, then mail_retry gives up with two of the five retries left
    assert [r.resolution for r in runs] == [
        *(
            Resolution(kind="exception", reason="intermittent-task", retry_after=s)
            for s in (1, 2, 4)
        ),
        Resolution(kind="failed"),
    ]


async def test_the_producer_gets_every_result_it_expects(
    tasks_app: ModuleType,
    inline_app: Callable[[App], Recorder],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from examples import tasks_producer  # it imports examples.tasks_app: after the fixture's URL

    recorder = inline_app(tasks_app.app)
    assert await tasks_producer.main() == 0
    assert "send_welcome_email(13): failed: builtins.ConnectionError" in capsys.readouterr().out
    assert recorder.calls(tasks_app.send_welcome_email) == [((7,), {}), ((13,), {})]
