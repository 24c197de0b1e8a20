"""Exceptions of the worker SDK: the ones handlers raise, and the one requests fail with.

A handler raises a :class:`TaskException` subclass to resolve its run as ``exception`` with
that reason (Taskcluster's ``reportException``); any other exception resolves it as
``failed``. :class:`RetryTask` asks for another run while the task has retries left.
:class:`RequestFailed` is how every HTTP call to the coordinator or to Azure fails, so
callers decide between retrying and giving up in one place; :func:`missing_scopes` reads
what a 403 says the worker lacks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import aiohttp


class TaskException(Exception):
    """Resolve the run as ``exception`` with :attr:`reason` instead of ``failed``.

    Subclasses name their reason; an instance may carry its own (a handler's exception that
    crossed a process boundary does).
    """

    reason: str


class MalformedPayload(TaskException):
    """The task's payload is invalid; the coordinator never retries the task."""

    reason = "malformed-payload"


class ResourceUnavailable(TaskException):
    """Something the task needs (an artifact, a secret, a service) cannot be had."""

    reason = "resource-unavailable"


class InternalError(TaskException):
    """The worker itself broke while running the task; the task is not to blame."""

    reason = "internal-error"


class RetryTask(TaskException):
    """The run failed for a passing reason: run the task again.

    Reported ``exception/intermittent-task``, which the coordinator answers with a new
    ``task-retry`` run while the task's ``retriesLeft`` is above 0; on the last run (none
    left) the worker reports ``failed`` instead, as Celery and Sidekiq fail a job whose
    retries ran out. ``retry_after`` (seconds, from 0 to the time left until the task's
    deadline) makes the retry claimable that long after the report instead of after the
    task's ``retryDelay`` (reportException's ``retryAfter``).
    """

    reason = "intermittent-task"

    def __init__(self, *args: object, retry_after: float | None = None) -> None:
        super().__init__(*args)
        if retry_after is not None and not 0 <= retry_after < math.inf:
            raise ValueError(f"retry_after must be a number of seconds from 0, not {retry_after}")
        self.retry_after = retry_after


class RequestFailed(Exception):
    """An HTTP request to the coordinator or to Azure got no acceptable answer.

    ``status`` is the HTTP status, or ``None`` when there was no usable answer at all
    (connection error, timeout, a body that is not what the route returns). ``code`` is the
    Taskcluster or Azure error code when the body carried one. ``url`` loses its query string,
    because that is where Azure's SAS signature lives and this text ends up in logs.
    """

    def __init__(
        self,
        *,
        method: str,
        url: str,
        status: int | None,
        code: str,
        message: str,
        retry_after: int | None = None,
    ):
        self.method = method
        self.url = url.partition("?")[0]
        super().__init__(f"{method} {self.url} -> {status or 'no response'} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        """Seconds the answer asked to wait before trying again (``Retry-After``), if it
        said."""

    @property
    def transient(self) -> bool:
        """Worth retrying: no answer, a server error, or throttling (Azure says 503 or 429)."""
        return self.status is None or self.status >= 500 or self.status == 429

    @property
    def refused(self) -> bool:
        """The coordinator rejects the worker's credentials (401) or scopes (403): the worker
        is misconfigured, whatever the request was about."""
        return self.status in (401, 403)


class NoAzureQueues(RequestFailed):
    """pollTaskUrls answered 404: the coordinator dispatches from its store (docs/dispatch.md)
    and hands work out through claimWork only."""

    @classmethod
    def of(cls, error: RequestFailed) -> NoAzureQueues:
        return cls(
            method=error.method,
            url=error.url,
            status=error.status,
            code=error.code,
            message=error.message,
        )


_MISSING_SCOPES = re.compile(r"missing the following scopes:\s*```\n(.*?)\n```", re.DOTALL)


def missing_scopes(error: RequestFailed) -> str:
    """What a 403 ``InsufficientScopes`` message says is missing, on one line (a lone scope,
    or a scope expression as compact JSON); the message's first line when it says no such
    thing."""
    found = _MISSING_SCOPES.search(error.message)
    text = found.group(1) if found else error.message.split("\n", 1)[0]
    return " ".join(text.split())


@contextmanager
def no_answer_fails(method: str, url: str) -> Iterator[None]:
    """Turn a connection error or timeout of the request made inside into a RequestFailed."""
    try:
        yield
    except (aiohttp.ClientError, TimeoutError) as error:
        raise RequestFailed(
            method=method, url=url, status=None, code=type(error).__name__, message=str(error)
        ) from error


def check_status(
    method: str,
    url: str,
    status: int,
    text: str,
    error_fields: Callable[[str], tuple[str, str]],
    *,
    retry_after: str | None = None,
) -> None:
    """Raise RequestFailed for an error status; ``error_fields`` reads the service's error body
    (Azure's XML or Taskcluster's JSON) into its code and message, ``retry_after`` is the
    answer's ``Retry-After`` header (seconds; an HTTP date is not used)."""
    if status >= 400:
        code, message = error_fields(text)
        raise RequestFailed(
            method=method,
            url=url,
            status=status,
            code=code,
            message=message,
            retry_after=int(retry_after) if retry_after and retry_after.isdigit() else None,
        )
