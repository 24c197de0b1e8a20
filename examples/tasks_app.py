"""Tasks as Python functions: the app a producer dispatches to and a worker serves.

    export TASKCLUSTER_ROOT_URL=http://127.0.0.1:8080   # ./scripts/dev prints these three
    export TASKCLUSTER_CLIENT_ID=... TASKCLUSTER_ACCESS_TOKEN=...
    .venv/bin/queue-worker --app examples.tasks_app:app --capacity 4   # terminal 1
    .venv/bin/python -m examples.tasks_producer                          # terminal 2

Every function's tasks go to the task queue ``examples/functions`` unless it names its own.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal

from worker_sdk import App

app = App.from_env(task_queue="examples/functions")

log = logging.getLogger(__name__)


@app.task
async def add(x: float, y: float) -> float:
    return x + y


@app.task(max_run_time=10)
def word_count(text: str) -> dict[str, int]:
    """A plain function: the worker runs it in a thread (what it logs is in the run's log)."""
    counts: dict[str, int] = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    log.info("counted %d distinct words", len(counts))
    return counts


def mail_retry(error: BaseException, retry_count: int) -> float | Literal[False]:
    """A custom retry block: wait 1, 2, then 4 s between tries, then give up; an address that
    cannot work is never retried."""
    if isinstance(error, ValueError) or retry_count >= 3:
        return False
    return 2.0**retry_count


@app.task(priority="high", retries=5, retry_with=mail_retry)
async def send_welcome_email(user_id: int) -> str:
    if user_id < 0:
        raise ValueError(f"there is no user {user_id}")
    if user_id == 13:  # the mail server never answers for this one
        raise ConnectionError("mail server unreachable")
    await asyncio.sleep(0.1)
    return f"welcome mail sent to user {user_id}"
