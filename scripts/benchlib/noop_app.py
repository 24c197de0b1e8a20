"""The no-op function of the rows that go through tasks as Python functions: the app
``queue-worker --app benchlib.noop_app:app`` serves (its workers name their task queue with
``--provisioner-id``/``--worker-type``). The harness dispatches through an app of its own
with the same function (:func:`benchlib.create.producer_app`).

Only ``worker_sdk`` is imported: every worker process imports this module as it starts, and
that import must not be what the rows measure (nor delay the workers' first polls).
"""

from __future__ import annotations

from worker_sdk import App


async def noop() -> None:
    """Returns ``None`` at once: the run completes without a ``result.json``."""


app = App(root_url="http://127.0.0.1:9", credentials=None, task_queue="bench-prov/any")
app.task(noop)

PAYLOAD = {"function": f"{__name__}:noop", "args": [], "kwargs": {}}
"""The payload of a call of :func:`noop`, for the rows that create tasks themselves."""
