"""Taskcluster's error bodies: the API's own errors, and the mapping of domain errors to them.

Each :class:`ApiError` carries the HTTP status and Taskcluster ``code``; ``str(error)`` is the
message. The domain and service layers raise :mod:`coordinator.domain.errors` instead, and
:func:`as_api_error` gives each its status here, the one place that knows HTTP. An outage of a
backing service (Azure's :class:`QueueUnavailable`, the store's :class:`StoreUnavailable`, the
artifact blob store's :class:`BlobUnavailable`) is a 503 with ``Retry-After``.
"""

from __future__ import annotations

from coordinator.azure.errors import QueueUnavailable
from coordinator.blobs.base import BlobUnavailable
from coordinator.domain.artifacts import ArtifactExpired
from coordinator.domain.errors import (
    Conflict,
    DomainError,
    Forbidden,
    InputError,
    NotFound,
    Throttled,
)
from coordinator.store.errors import StoreUnavailable

Outage = QueueUnavailable | StoreUnavailable | BlobUnavailable
"""A backing service that does not answer: a 503."""

RETRY_AFTER_SECONDS = 2
"""``Retry-After`` of a 503: outages seen so far (a database restart, a failover) last seconds."""


class ApiError(Exception):
    """Base of every error that becomes an HTTP error body."""

    status: int = 500
    code: str = "InternalServerError"
    retry_after: int | None = None
    """Seconds for the ``Retry-After`` header, if the answer has one."""


class InputValidationError(ApiError):
    """The body, query or path does not match its JSON schema."""

    status = 400
    code = "InputValidationError"


class RequestInputError(ApiError):
    status = 400
    code = "InputError"


class AuthenticationFailed(ApiError):
    status = 401
    code = "AuthenticationFailed"


class InsufficientScopes(ApiError):
    status = 403
    code = "InsufficientScopes"


class SignedUrlRefused(ApiError):
    """An artifact upload or download URL whose signature is wrong or expired."""

    status = 403
    code = "SignedUrlRefused"


class ResourceNotFound(ApiError):
    status = 404
    code = "ResourceNotFound"


class RequestConflict(ApiError):
    status = 409
    code = "RequestConflict"


class ResourceExpired(ApiError):
    status = 410
    code = "ResourceExpired"


class LengthRequired(ApiError):
    """An artifact upload without ``Content-Length``."""

    status = 411
    code = "LengthRequired"


class InputTooLarge(ApiError):
    status = 413
    code = "InputTooLarge"


class TooManyRequests(ApiError):
    """A claim a task queue's pause or limits refuse for now; ``Retry-After`` says when to
    ask again."""

    status = 429
    code = "TooManyRequests"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ServiceUnavailable(ApiError):
    """A backing service (Azure, the store) is unreachable; the caller should retry later."""

    status = 503
    code = "ServiceUnavailable"
    retry_after = RETRY_AFTER_SECONDS


_DOMAIN: dict[type[DomainError], type[ApiError]] = {
    ArtifactExpired: ResourceExpired,
    InputError: RequestInputError,
    NotFound: ResourceNotFound,
    Conflict: RequestConflict,
    Forbidden: InsufficientScopes,
}


def as_api_error(error: DomainError | Outage) -> ApiError:
    """The Taskcluster error a domain error (or an outage) is answered with."""
    if isinstance(error, QueueUnavailable):
        return ServiceUnavailable(f"Azure queues are unreachable, retry later: {error}")
    if isinstance(error, StoreUnavailable | BlobUnavailable):
        return ServiceUnavailable(f"{error}; retry later")
    if isinstance(error, Throttled):
        return TooManyRequests(str(error), retry_after=error.retry_after_s)
    for kind, api_error in _DOMAIN.items():
        if isinstance(error, kind):
            return api_error(str(error))
    raise TypeError(f"no API error for {type(error).__name__}")  # a new DomainError subclass
