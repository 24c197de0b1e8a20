"""A function's defaults, as ``@app.task(...)`` gives them: :class:`TaskOptions`.

Some go into every task definition ``dispatch`` writes for it (task queue, priority,
retries, retry delay, retry priority, claim timeout); the others decide on the worker what a
run whose function raised reports (``retry_on``, ``retry_with``, :meth:`TaskOptions.retry_for`)
and how long it may run (``max_run_time``). Pure: no I/O, unit-tested as plain values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from worker_sdk.errors import RetryTask
from worker_sdk.priorities import PRIORITIES, TaskQueue

RetryWith = Callable[[BaseException, int], "float | Literal[False] | None"]
"""``retry_with(exception, retry_count)``: seconds until the retry, ``None`` for the task's
own retry policy, ``False`` to give up (the run is ``failed``). ``retry_count`` is 0 at the
first failure."""

RetryDelay = float | Mapping[str, Any]
"""A function's ``retry_delay``: seconds before each retry, or the definition's
``retryDelay`` object (``{"base", "factor", "max"}`` or ``{"schedule": [...]}``)."""

MIN_CLAIM_TIMEOUT, MAX_CLAIM_TIMEOUT = 30, 86_400
"""The coordinator's bounds of ``claimTimeout`` (seconds)."""


@dataclass(frozen=True, kw_only=True)
class TaskOptions:
    """What ``@app.task(...)`` says about a function; ``None`` leaves a field to the app
    (task queue) or to the coordinator's defaults (the rest)."""

    task_queue: TaskQueue | None = None
    priority: str | None = None
    retries: int | None = None
    retry_delay: RetryDelay | None = None
    retry_priority: str | None = None
    claim_timeout: int | None = None
    retry_on: tuple[type[BaseException], ...] = field(default=())
    retry_with: RetryWith | None = None
    max_run_time: float | None = None

    def __post_init__(self) -> None:
        for name in ("priority", "retry_priority"):
            value = getattr(self, name)
            if value is not None and value not in PRIORITIES:
                raise ValueError(f"{name} {value!r} is not one of {', '.join(PRIORITIES)}")
        if self.retries is not None and not (isinstance(self.retries, int) and self.retries >= 0):
            raise ValueError(f"retries must be a whole number from 0, not {self.retries!r}")
        if self.claim_timeout is not None and not (
            MIN_CLAIM_TIMEOUT <= self.claim_timeout <= MAX_CLAIM_TIMEOUT
        ):
            raise ValueError(
                f"claim_timeout must be {MIN_CLAIM_TIMEOUT} to {MAX_CLAIM_TIMEOUT} seconds, "
                f"not {self.claim_timeout}"
            )
        if isinstance(self.retry_delay, int | float) and not 0 <= self.retry_delay < math.inf:
            raise ValueError(f"retry_delay must be seconds from 0, not {self.retry_delay}")
        if self.max_run_time is not None and not 0 < self.max_run_time < math.inf:
            raise ValueError(
                f"max_run_time must be a positive number of seconds, not {self.max_run_time}"
            )
        for kind in self.retry_on:
            if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                raise TypeError(f"retry_on must list exception classes, not {kind!r}")

    def definition_fields(self) -> dict[str, Any]:
        """The task definition's fields these options set (all but ``taskQueueId``)."""
        fields: dict[str, Any] = {}
        if self.priority is not None:
            fields["priority"] = self.priority
        if self.retries is not None:
            fields["retries"] = self.retries
        if isinstance(self.retry_delay, int | float):
            fields["retryDelay"] = {"schedule": [self.retry_delay]}
        elif self.retry_delay is not None:
            fields["retryDelay"] = dict(self.retry_delay)
        if self.retry_priority is not None:
            fields["retryPriority"] = self.retry_priority
        if self.claim_timeout is not None:
            fields["claimTimeout"] = self.claim_timeout
        return fields

    def retry_for(self, error: Exception, *, retry_count: int) -> RetryTask | None:
        """What a run whose function raised ``error`` asks for: a retry (the
        :class:`RetryTask` to raise, with ``retry_after`` when ``retry_with`` named the
        delay), or ``None``: the run fails.

        With ``retries`` given, any exception asks for a retry unless ``retry_on`` narrows
        them to its classes; without ``retries``, ``retry_on`` and ``retry_with`` nothing is
        retried. ``retry_with`` is asked about every exception ``retry_on`` lets through (all
        of them when there is no ``retry_on``).

        :raises TypeError: ``retry_with`` answered something else than seconds, ``None`` or
            ``False``.
        """
        if self.retry_on and not isinstance(error, self.retry_on):
            return None
        if self.retry_with is None:
            wanted = bool(self.retry_on) or self.retries is not None
            return RetryTask(_described(error)) if wanted else None
        decision = self.retry_with(error, retry_count)
        if decision is False:
            return None
        if decision is None:
            return RetryTask(_described(error))
        if (
            isinstance(decision, bool)
            or not isinstance(decision, int | float)
            or not 0 <= decision < math.inf
        ):
            raise TypeError(
                f"retry_with answered {decision!r}: it must return seconds (from 0), None "
                "(the task's retry policy) or False (give up)"
            )
        return RetryTask(_described(error), retry_after=decision)


def _described(error: BaseException) -> str:
    return f"{type(error).__qualname__}: {error}"
