"""HTTP plumbing shared by every endpoint: JSON bodies in and out, and Taskcluster error bodies.

* :func:`error_middleware` turns every failure into ``{code, message, requestInfo}``: our
  :class:`~coordinator.api.errors.ApiError`\\ s with their status, aiohttp's own 404/405/413, and
  anything unexpected as a 500 that names an incident id (the traceback goes to the log with
  that id, never to the client).
  Azure, the store or the artifact blob store being unreachable is a 503
  ``ServiceUnavailable`` with ``Retry-After``.
* :func:`read_json` parses a request body with errors that say what was wrong.
"""

from __future__ import annotations

import json
import logging
import math
import re
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import hdrs, web

from coordinator.api.errors import (
    ApiError,
    InputTooLarge,
    InputValidationError,
    ResourceNotFound,
    as_api_error,
)
from coordinator.azure.errors import QueueUnavailable
from coordinator.blobs.base import BlobUnavailable
from coordinator.domain.errors import DomainError
from coordinator.domain.json_text import compact_bytes
from coordinator.store.errors import StoreUnavailable

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PAYLOAD = web.RequestKey[Any]("payload")
"""Request key under which :func:`read_json` leaves the parsed body, for error bodies."""
ENDPOINT = web.RequestKey[str]("endpoint")
"""Request key naming the API method being served, for error bodies."""


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=compact_bytes(body), status=status, content_type="application/json")


async def read_json(request: web.Request, *, max_bytes: int) -> Any:
    """The request body parsed as JSON, or ``None`` when there is none (only whitespace).

    :raises InputTooLarge: the body is over ``max_bytes``.
    :raises InputValidationError: it is encoded (the server never decodes request bodies:
        artifact uploads are stored as sent).
    """
    if request.content_length is not None and request.content_length > max_bytes:
        raise _too_large(max_bytes)
    encoding = request.headers.get(hdrs.CONTENT_ENCODING, "identity")
    if encoding.lower() != "identity":
        raise InputValidationError(
            f"request body has Content-Encoding {encoding}: send the JSON body unencoded"
        )
    # A body over the application's limit raises HTTPRequestEntityTooLarge, which
    # error_middleware answers (authentication may read the body first).
    raw = await request.read()
    if len(raw) > max_bytes:
        raise _too_large(max_bytes)
    if not raw.strip():
        return None
    body = _parse(raw)
    request[PAYLOAD] = body
    return body


def _too_large(max_bytes: int) -> InputTooLarge:
    return InputTooLarge(f"request body too large: this endpoint accepts at most {max_bytes} bytes")


MAX_DEPTH = 128
"""Deepest nesting of arrays and objects a request body may have. Deeper bodies would exhaust
Python's recursion limit somewhere between parsing, validating, storing and answering."""

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _not_a_number(text: str) -> Any:
    raise ValueError(f"{text} is not a JSON number")


def _parse(raw: bytes) -> Any:
    """Strict JSON: no ``NaN``/``Infinity``, no number too large for a double, no lone UTF-16
    surrogate (it can't be stored or sent back as UTF-8) and at most :data:`MAX_DEPTH` levels."""
    try:
        body = json.loads(raw, parse_float=_finite, parse_constant=_not_a_number)
    except UnicodeDecodeError:
        raise InputValidationError("request body is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise InputValidationError(
            f"request body is not valid JSON: {error.msg} at line {error.lineno} "
            f"column {error.colno}"
        ) from None
    except RecursionError:
        raise InputValidationError(
            f"request body is nested too deeply: at most {MAX_DEPTH} levels are allowed"
        ) from None
    except ValueError as error:  # from the hooks above, or an integer with too many digits
        raise InputValidationError(f"request body is not valid JSON: {error}") from None
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(body) > MAX_DEPTH:
        raise InputValidationError(
            f"request body is nested too deeply: at most {MAX_DEPTH} levels are allowed"
        )
    if _SURROGATE_ESCAPE.search(raw):
        try:
            compact_bytes(body)
        except UnicodeEncodeError as error:
            raise InputValidationError(
                f"request body has a lone UTF-16 surrogate escape ({error.object[error.start]!a}),"
                " which is not a Unicode character"
            ) from None
    return body


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, without recursion (stops counting past :data:`MAX_DEPTH`).

    Only arrays and objects go on the stack, checked by exact type (``json.loads`` makes no
    subclasses): a createTasks body has thousands of strings, and stacking them too made this
    walk three times slower than parsing the body.
    """
    if type(value) is not dict and type(value) is not list:
        return 0
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > MAX_DEPTH:
                break
        for child in node.values() if type(node) is dict else node:
            if type(child) is dict or type(child) is list:
                stack.append((child, depth + 1))
    return deepest


def error_body(
    code: str, message: str, *, method: str, params: dict[str, str], payload: Any
) -> dict[str, Any]:
    """Taskcluster's error body: ``{code, message, requestInfo}``."""
    return {
        "code": code,
        "message": message,
        "requestInfo": {
            "method": method,
            "params": params,
            "payload": payload,
            "time": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        },
    }


def _error_body(request: web.Request, code: str, message: str) -> dict[str, Any]:
    return error_body(
        code,
        message,
        method=request.get(ENDPOINT, request.method),
        params=dict(request.match_info),
        payload=request.get(PAYLOAD, {}),
    )


def error_response(request: web.Request, error: ApiError) -> web.Response:
    response = json_response(_error_body(request, error.code, str(error)), status=error.status)
    if error.retry_after is not None:
        response.headers["Retry-After"] = str(error.retry_after)
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as error:
        return error_response(request, error)
    except (DomainError, QueueUnavailable, StoreUnavailable, BlobUnavailable) as error:
        return error_response(request, as_api_error(error))
    except web.HTTPRequestEntityTooLarge as error:
        return error_response(request, InputTooLarge(f"request body too large: {error.text}"))
    except web.HTTPNotFound:
        return error_response(
            request, ResourceNotFound(f"no such endpoint: {request.method} {request.path}")
        )
    except web.HTTPMethodNotAllowed as error:
        allowed = ", ".join(sorted(error.allowed_methods))
        response = json_response(
            _error_body(
                request,
                "MethodNotAllowed",
                f"{request.method} is not allowed on {request.path}; allowed: {allowed}",
            ),
            status=405,
        )
        response.headers["Allow"] = allowed  # RFC 9110: a 405 lists what is allowed
        return response
    except web.HTTPException:
        raise
    except Exception:
        incident = uuid.uuid4().hex
        log.exception(
            "internal error incidentId=%s method=%s path=%s", incident, request.method, request.path
        )
        return json_response(
            _error_body(
                request,
                "InternalServerError",
                f"Internal Server Error; incidentId {incident} (the operator can find it in the "
                "coordinator's log)",
            ),
            status=500,
        )
