"""The app ``queue-worker --app tests.e2e.function_app:app`` serves in
tests/e2e/test_functions_e2e.py, and the functions it registers.

The worker's :data:`app` reads its coordinator and credentials from the environment as
``queue-worker`` does, and its task queue from ``$FUNCTIONS_TASK_QUEUE``; the test registers
the same functions (:func:`register`) on an app of its own, signed as root, so both sides
call each function by the same name.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Literal

from worker_sdk import App

TASK_QUEUE_ENV = "FUNCTIONS_TASK_QUEUE"

RETRY_DELAYS = (0.5, 1.0, 1.5)
"""What :func:`spaced` answers for its first three failures; it gives up at the fourth."""

log = logging.getLogger(__name__)


async def add(x: int, y: int) -> int:
    return x + y


def divide(x: float, y: float) -> float:
    """A plain function (run in a thread); ``y=0`` raises ZeroDivisionError remotely."""
    log.info("dividing %s by %s", x, y)
    return x / y


async def shout(text: str, *, times: int = 1) -> str:
    return " ".join([text.upper()] * times)


async def nothing() -> None:
    """Returns ``None``: its runs leave no ``result.json``."""


def unreturnable() -> Any:
    return {1, 2, 3}  # a set: not JSON


async def sleepy(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "woke up"


def always_failing() -> None:
    raise ValueError("not today")


def spacing(error: BaseException, retry_count: int) -> float | Literal[False]:
    """The blog's custom retry block: the next delay, then ``False``."""
    return RETRY_DELAYS[retry_count] if retry_count < len(RETRY_DELAYS) else False


def register(app: App) -> None:
    app.task(add)
    app.task(divide)
    app.task(shout)
    app.task(unreturnable)
    app.task(nothing)
    app.task(max_run_time=1)(sleepy)
    app.task(retries=5, retry_with=spacing)(always_failing)


app = App(
    root_url=os.environ.get("TASKCLUSTER_ROOT_URL", "http://127.0.0.1:9"),
    credentials=None,
    task_queue=os.environ.get(TASK_QUEUE_ENV, "functions/unset"),
)
register(app)
