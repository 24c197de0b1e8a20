"""Taskcluster's error bodies: the API's own errors, and the mapping of domain errors to them.

Each :class:`ApiError` carries the HTTP status and Taskcluster ``code``; ``str(error)`` is the
message. The domain and service layers raise :mod:`coordinator.domain.errors` instead, and
:func:`as_api_error` gives each its status here, the one place that knows HTTP.
"""

from __future__ import annotations

from coordinator.azure.errors import QueueUnavailable
from coordinator.domain.errors import Conflict, DomainError, Forbidden, InputError, NotFound


class ApiError(Exception):
    """Base of every error that becomes an HTTP error body."""

    status: int = 500
    code: str = "InternalServerError"


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


class ResourceNotFound(ApiError):
    status = 404
    code = "ResourceNotFound"


class RequestConflict(ApiError):
    status = 409
    code = "RequestConflict"


class InputTooLarge(ApiError):
    status = 413
    code = "InputTooLarge"


class ServiceUnavailable(ApiError):
    """A backing service (Azure) is unreachable; the caller should retry later."""

    status = 503
    code = "ServiceUnavailable"


_DOMAIN: dict[type[DomainError], type[ApiError]] = {
    InputError: RequestInputError,
    NotFound: ResourceNotFound,
    Conflict: RequestConflict,
    Forbidden: InsufficientScopes,
}


def as_api_error(error: DomainError | QueueUnavailable) -> ApiError:
    """The Taskcluster error a domain error (or an Azure outage) is answered with."""
    if isinstance(error, QueueUnavailable):
        return ServiceUnavailable(f"Azure queues are unreachable, retry later: {error}")
    for kind, api_error in _DOMAIN.items():
        if isinstance(error, kind):
            return api_error(str(error))
    raise TypeError(f"no API error for {type(error).__name__}")  # a new DomainError subclass
