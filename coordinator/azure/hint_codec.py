"""The hint message text: ``base64(JSON {"taskId", "runId", "hintId"})``.

Hints are not truth: a message that does not decode is garbage to delete, never an error.
"""

from __future__ import annotations

import base64
import binascii
import json


def encode_hint(*, task_id: str, run_id: int, hint_id: str) -> str:
    """A hint's message text."""
    body = json.dumps({"taskId": task_id, "runId": run_id, "hintId": hint_id})
    return base64.b64encode(body.encode()).decode("ascii")


def decode_hint(text: str) -> tuple[str, int] | None:
    """``(taskId, runId)`` of a hint's message text, or ``None`` if it is not a hint."""
    try:
        body = json.loads(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(body, dict):
        return None
    task_id, run_id = body.get("taskId"), body.get("runId")
    # bool is an int subclass; ``"runId": true`` is garbage, not run 1.
    if not isinstance(task_id, str) or type(run_id) is not int or run_id < 0:
        return None
    return task_id, run_id
