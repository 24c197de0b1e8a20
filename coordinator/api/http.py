"""HTTP plumbing shared by every endpoint: JSON bodies in and out, and Taskcluster error bodies.

* :func:`error_middleware` turns every failure into ``{code, message, requestInfo}``: our
  :class:`~coordinator.errors.ApiError`\\ s with their status, aiohttp's own 404/405/413, and
  anything unexpected as a 500 that names an incident id (the traceback goes to the log with
  that id, never to the client).
* :func:`read_json` parses a request body with errors that say what was wrong.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from coordinator.errors import (
    ApiError,
    InputTooLarge,
    InputValidationError,
    ResourceNotFound,
)

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PAYLOAD = "coordinator.payload"
"""Request key under which :func:`read_json` leaves the parsed body, for error bodies."""
ENDPOINT = "coordinator.endpoint"
"""Request key naming the API method being served, for error bodies."""

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=_dumps(body).encode("utf-8"), status=status, content_type="application/json"
    )


async def read_json(request: web.Request) -> Any:
    """The request body parsed as JSON; an empty body is ``{}`` (Taskcluster clients send
    nothing for bodiless POSTs)."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as error:
        raise InputTooLarge(f"request body too large: {error.text}") from None
    if not raw.strip():
        body: Any = {}
    else:
        try:
            body = json.loads(raw)
        except UnicodeDecodeError:
            raise InputValidationError("request body is not UTF-8 text") from None
        except json.JSONDecodeError as error:
            raise InputValidationError(
                f"request body is not valid JSON: {error.msg} at line {error.lineno} "
                f"column {error.colno}"
            ) from None
    request[PAYLOAD] = body
    return body


def _error_body(request: web.Request, code: str, message: str) -> dict[str, Any]:
    return {
        "code": code,
        "message": message,
        "requestInfo": {
            "method": request.get(ENDPOINT, request.method),
            "params": dict(request.match_info),
            "payload": request.get(PAYLOAD, {}),
            "time": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        },
    }


def error_response(request: web.Request, error: ApiError) -> web.Response:
    return json_response(_error_body(request, error.code, str(error)), status=error.status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as error:
        return error_response(request, error)
    except web.HTTPRequestEntityTooLarge as error:
        return error_response(request, InputTooLarge(f"request body too large: {error.text}"))
    except web.HTTPNotFound:
        return error_response(
            request, ResourceNotFound(f"no such endpoint: {request.method} {request.path}")
        )
    except web.HTTPMethodNotAllowed as error:
        return json_response(
            _error_body(
                request,
                "MethodNotAllowed",
                f"{request.method} is not allowed on {request.path}; "
                f"allowed: {', '.join(sorted(error.allowed_methods))}",
            ),
            status=405,
        )
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
