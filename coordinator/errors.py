"""Errors the API answers with, in Taskcluster's codes; raised at any layer, rendered by the API.

Each carries the HTTP status and Taskcluster ``code``; ``str(error)`` is the message, which
must say what was wrong in terms the caller can act on.
"""

from __future__ import annotations


class ApiError(Exception):
    """Base of every error that becomes an HTTP error body."""

    status: int = 500
    code: str = "InternalServerError"


class InputError(ApiError):
    """The request is well-formed but not acceptable (bad dates, unknown dependency, ...)."""

    status = 400
    code = "InputError"


class InputValidationError(ApiError):
    """The body, query or path does not match its JSON schema."""

    status = 400
    code = "InputValidationError"


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
