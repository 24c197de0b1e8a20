"""The no-op function of the rows that go through tasks as Python functions: the app
``queue-worker --app benchlib.noop_app:app`` serves (its workers name their task queue with
``--provisioner-id``/``--worker-type``), and :func:`producer_app`, the same function on an app
of the row's coordinator and task queue, which the harness dispatches through."""

from __future__ import annotations

from typing import Any

from benchlib.coordproc import PROVISIONER_ID, Coordinator
from worker_sdk import App, TaskFunction


async def noop() -> None:
    """Returns at once: the run completes with ``result.json`` ``{"value": null}``."""


app = App(root_url="http://127.0.0.1:9", credentials=None, task_queue=f"{PROVISIONER_ID}/any")
app.task(noop)

PAYLOAD = {"function": f"{__name__}:noop", "args": [], "kwargs": {}}
"""The payload of a call of :func:`noop`, for the rows that create tasks themselves."""


def producer_app(coordinator: Coordinator, worker_type: str) -> tuple[App, TaskFunction[..., Any]]:
    """An app dispatching :func:`noop` to ``coordinator``'s task queue ``worker_type``."""
    made = App(
        root_url=coordinator.url,
        credentials=coordinator.credentials,
        task_queue=f"{PROVISIONER_ID}/{worker_type}",
    )
    return made, made.task(noop)
