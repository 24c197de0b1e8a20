"""The errors of the domain and service layers, free of any transport.

``str(error)`` is the message, which must say what was wrong in terms the caller can act on.
The API maps each to a Taskcluster error body (:mod:`coordinator.api.errors`); resolvers and
claimWork treat them as definitive answers about a task ("another actor got there first").
"""

from __future__ import annotations

import math


class DomainError(Exception):
    """A definitive refusal: repeating the same request gives the same answer (except
    :class:`Throttled`, which says when it may not)."""


class InputError(DomainError):
    """The request is well-formed but not acceptable (bad dates, unknown dependency, ...)."""


class NotFound(DomainError):
    """The task or run does not exist."""


class Conflict(DomainError):
    """The operation is not allowed in the task's current state."""


class Forbidden(DomainError):
    """The caller may not do this to the task as it is now (a scope check that depends on the
    stored task, such as who holds a run, made with the transition it guards)."""


class Throttled(DomainError):
    """A claim its task queue's pause or limits refuse for now
    (:mod:`coordinator.domain.queue_controls`): the same request may succeed after
    :attr:`retry_after_ms`, so it is no answer about the task."""

    def __init__(self, message: str, *, retry_after_ms: int) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms

    @property
    def retry_after_s(self) -> int:
        """:attr:`retry_after_ms` in whole seconds, rounded up, at least 1."""
        return max(1, math.ceil(self.retry_after_ms / 1000))
