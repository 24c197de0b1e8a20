"""What a function's run leaves for the caller of ``TaskHandle.result()``: the artifact
``result.json`` of the run, and :class:`TaskFailed`.

The worker serving an app uploads ``result.json`` (``application/json``, private: reading it
takes ``queue:get-artifact:result.json``, which the producer's credentials usually hold) before
it reports the run: ``{"value": <the return value>}`` from a run that completed (none when
the function returned ``None``: ``result()`` answers ``None`` for a completed run without
one), and ``{"error": {"type", "message", "traceback"}}`` from one whose function raised,
whatever the report (failed, or intermittent-task for a retry). A task that ended without its
function raising (canceled, deadline-exceeded, claim-expired, a worker that died) has no such
artifact, and :class:`TaskFailed` says how it ended instead.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Mapping
from typing import Any

RESULT_ARTIFACT = "result.json"
RESULT_CONTENT_TYPE = "application/json"


class TaskFailed(Exception):
    """A task ended ``failed`` or ``exception``: ``result()`` raises this instead of a value.

    ``type``, ``message`` and ``traceback`` are the remote exception's (``type`` as
    ``module.QualifiedName``, e.g. ``builtins.ValueError``), or ``None`` when the function
    never raised (``reason`` then says why the task ended: ``canceled``,
    ``deadline-exceeded``, ...). ``state`` is the task's (``failed`` or ``exception``).
    """

    def __init__(
        self,
        *,
        task_id: str,
        state: str,
        reason: str,
        type: str | None = None,
        message: str = "",
        traceback: str | None = None,
    ) -> None:
        self.task_id = task_id
        self.state = state
        self.reason = reason
        self.type = type
        self.message = message
        self.traceback = traceback
        what = f"{type}: {message}" if type is not None else message or "no error was recorded"
        super().__init__(f"task {task_id} ended {state}/{reason}: {what}")


def value_body(value: Any) -> bytes:
    """``result.json`` of a completed run.

    :raises TypeError: ``value`` is not JSON (the run then fails, saying so).
    """
    try:
        return json.dumps({"value": value}, allow_nan=False).encode()
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"the return value is not JSON ({error}): return str, int, float, bool, None, "
            "or lists and dicts of them"
        ) from None


def error_body(error: BaseException) -> bytes:
    """``result.json`` of a run whose function raised ``error``."""
    kind = type(error)
    return json.dumps(
        {
            "error": {
                "type": f"{kind.__module__}.{kind.__qualname__}",
                "message": str(error),
                "traceback": "".join(traceback.format_exception(error)).rstrip("\n"),
            }
        }
    ).encode()


def outcome(content: bytes) -> Mapping[str, Any]:
    """A ``result.json`` read back: ``{"value": ...}`` or ``{"error": {...}}``.

    :raises ValueError: it is neither.
    """
    body = json.loads(content)
    if not isinstance(body, dict) or not ({"value"} <= body.keys() or "error" in body):
        raise ValueError(f"{RESULT_ARTIFACT} holds neither a value nor an error: {body!r}")
    return body


def task_failed(
    task_id: str, status: Mapping[str, Any], body: Mapping[str, Any] | None
) -> TaskFailed:
    """The :class:`TaskFailed` of a task whose status is ``failed`` or ``exception``, from the
    ``result.json`` of its last run (``body``, ``None`` when there is none)."""
    run = status["runs"][-1] if status.get("runs") else {}
    reason = str(run.get("reasonResolved") or status["state"])
    error = body.get("error") if body is not None else None
    if not isinstance(error, Mapping):
        return TaskFailed(
            task_id=task_id,
            state=status["state"],
            reason=reason,
            message="its last run recorded no error (the function did not raise: see the "
            "run's log, public/logs/live_backing.log)",
        )
    return TaskFailed(
        task_id=task_id,
        state=status["state"],
        reason=reason,
        type=str(error.get("type")),
        message=str(error.get("message", "")),
        traceback=str(error.get("traceback", "")),
    )
