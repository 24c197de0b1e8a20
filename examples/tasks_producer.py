"""Dispatching the functions of :mod:`examples.tasks_app` and waiting for their results.

    .venv/bin/queue-worker --app examples.tasks_app:app --capacity 4   # terminal 1
    .venv/bin/python -m examples.tasks_producer                          # terminal 2

It prints each result (or the remote error) as it comes, and exits 0 when every one is what
this expects, including the user whose welcome mail fails after three retries.
"""

from __future__ import annotations

import asyncio
import sys
import time

from examples.tasks_app import add, app, send_welcome_email, word_count
from worker_sdk import TaskFailed


async def main() -> int:
    started = time.monotonic()

    def show(what: str, outcome: object) -> None:
        print(f"[{time.monotonic() - started:5.1f}s] {what}: {outcome}", flush=True)

    async with app:
        total = await add.dispatch(2, 3)
        counts = await word_count.dispatch_many([("the cat and the hat",), ("to be or not",)])
        later = await send_welcome_email.dispatch(7, wait=2)  # claimable in 2 s
        unlucky = await send_welcome_email.dispatch(13)
        show("add(2, 3)", await total.result(timeout=60))
        for handle in counts:
            show("word_count", await handle.result(timeout=60))
        show("send_welcome_email(7), 2 s later", await later.result(timeout=60))
        try:
            await unlucky.result(timeout=120)
        except TaskFailed as failed:
            show("send_welcome_email(13)", f"{failed.state}: {failed.type}: {failed.message}")
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
