"""Calling the coordinator's REST API as its clients do: one JSON request, Hawk-signed with
the worker SDK's own signing (:func:`worker_sdk.client.authorization`) when there are
credentials, and its answer read back as a :class:`Response`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from hawk_signing import Credentials, authorization

API = "/api/queue/v1"
"""Where the API lies under a coordinator's root URL."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Response:
    status: int
    body: Any
    """The answer parsed as JSON; its text when it is not JSON; ``None`` when empty."""


async def read(response: aiohttp.ClientResponse) -> Response:
    """The status and the body of an answer."""
    text = await response.text()
    try:
        body: Any = json.loads(text) if text else None
    except ValueError:
        body = text
    return Response(status=response.status, body=body)


async def call(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: Any = None,
    *,
    credentials: Credentials | None = None,
    request_timeout: aiohttp.ClientTimeout | None = None,
) -> Response:
    """One request with ``body`` as JSON, Hawk-signed when there are ``credentials``.
    ``url`` is sent exactly as given (percent-encoded already); ``request_timeout``
    defaults to the session's."""
    content = "" if body is None else json.dumps(body)
    headers = {"Content-Type": "application/json"} if content else {}
    if credentials is not None:
        headers["Authorization"] = authorization(
            credentials,
            method=method,
            url=url,
            content=content,
            content_type="application/json" if content else "",
        )
    async with session.request(
        method,
        # as signed: yarl must not re-quote the path, nor aiohttp add a Content-Type
        URL(url, encoded=True),
        data=content.encode() if content else None,
        headers=headers,
        skip_auto_headers=() if content else ("Content-Type",),
        timeout=session.timeout if request_timeout is None else request_timeout,
    ) as response:
        return await read(response)
