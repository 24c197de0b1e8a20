"""The example worker: greets, takes a little while, and shows each way a run can end.

Payload ``{"greeting": str, "seconds": number 0..60, "fail": bool}``, all optional. Run it::

    queue-worker --provisioner-id examples --worker-type hello --capacity 4 examples.hello:handle

A payload that is not like that resolves the run ``exception/malformed-payload`` (never
retried); ``"fail": true`` resolves it ``failed``; anything else ``completed``.
"""

from __future__ import annotations

import asyncio
import logging

from worker_sdk import MalformedPayload, TaskRun

log = logging.getLogger(__name__)


async def handle(run: TaskRun) -> None:
    payload = run.payload
    if not isinstance(payload, dict):
        raise MalformedPayload(f"payload must be an object, not {payload!r}")
    seconds = payload.get("seconds", 1)
    # bool is an int subclass, and "seconds": true is surely a mistake.
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds <= 60:
        raise MalformedPayload(f"seconds must be a number from 0 to 60, not {seconds!r}")
    log.info(
        "hello taskId=%s runId=%s greeting=%r seconds=%s",
        run.task_id,
        run.run_id,
        payload.get("greeting", "hello"),
        seconds,
    )
    await asyncio.sleep(seconds)
    if payload.get("fail"):
        raise RuntimeError("the payload asked this run to fail")
