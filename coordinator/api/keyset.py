"""The continuationTokens of every listing (a task group's tasks and a task's dependents by task
id; task queues, provisioners, worker types, workers, a task queue's pending and claimed runs
by their sort keys; the management listings by task id; a run's artifacts by name; the auth
service's clients and roles by id, and its audit entries by time).

A token is ``<key>.<mac>``: base64url of the JSON array of the sort key of the last item a
page returned, and an HMAC-SHA256 (truncated to 128 bits) of that key together with the query
it answered (the method, its path parameters and every query parameter but ``limit``,
``continuationToken`` and a signed URL's ``bewit``, in a canonical order). So a token cannot be
forged, nor replayed against another listing or other filters; ``limit`` may change between
pages. The HMAC key is shared by every replica through the store (:data:`TOKEN_KEY`), so any
replica continues a listing another began.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from aiohttp import web

from coordinator.api.errors import InputValidationError
from coordinator.api.http import ENDPOINT
from coordinator.domain.artifacts import MAX_NAME_LENGTH
from coordinator.domain.listings import Key, Page

T = TypeVar("T")

TOKEN_KEY = web.AppKey("continuation_token_key", bytes)
"""The HMAC key of the tokens, set when the app starts."""

LIST_LIMIT = 1000
"""Largest page a listing returns (Taskcluster's cap)."""

_UNBOUND = frozenset({"limit", "continuationToken", "bewit"})

_ID = re.compile(r"[A-Za-z0-9_-]{1,38}")
"""What the ids in sort keys are: task ids, provisionerIds, workerTypes, workerGroups and
workerIds."""
_NAME = re.compile(rf"[\x20-\x7e]{{1,{MAX_NAME_LENGTH}}}")


class Name(str):
    """The kind (for :func:`after`) of a sort key value that is a name of printable ASCII (an
    artifact name, a clientId, a roleId) rather than an id."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(request: web.Request, encoded_key: str) -> str:
    query = sorted((name, value) for name, value in request.query.items() if name not in _UNBOUND)
    bound = json.dumps(
        [request.get(ENDPOINT, request.path), sorted(request.match_info.items()), query]
    )
    digest = hmac.new(
        request.app[TOKEN_KEY], f"{bound}\n{encoded_key}".encode(), hashlib.sha256
    ).digest()
    return _b64(digest[:16])


def limit(request: web.Request) -> int:
    """The request's ``limit``, capped silently at :data:`LIST_LIMIT` as Taskcluster's
    listings do."""
    return min(int(request.query.get("limit", LIST_LIMIT)), LIST_LIMIT)


def token(request: web.Request, key: Key) -> str:
    """The continuationToken of a page of ``request``'s listing that ended on ``key``."""
    encoded = _b64(json.dumps(key).encode())
    return f"{encoded}.{_mac(request, encoded)}"


def page_body(
    request: web.Request, name: str, page: Page[T, Key], render: Callable[[T], Any]
) -> dict[str, Any]:
    """``{<name>: [rendered items], continuationToken?}``: a page as the API answers it."""
    body: dict[str, Any] = {name: [render(item) for item in page.items]}
    if page.next_after is not None:
        body["continuationToken"] = token(request, page.next_after)
    return body


def after(request: web.Request, kinds: Sequence[type[str] | type[int]]) -> Key | None:
    """The key the request's continuationToken names, whose values are of ``kinds``; ``None``
    for the first page.

    :raises InputValidationError: a token this API did not issue for this listing, or one
        issued for another query.
    """
    given = request.query.get("continuationToken")
    if not given:
        return None
    encoded, _, mac = given.partition(".")
    if not hmac.compare_digest(mac.encode(), _mac(request, encoded).encode()):
        raise InputValidationError(
            f"continuationToken {given!r} is not one this API issued for this query: pass the "
            "token of the previous page of the same listing, with the same parameters (only "
            "limit may change)"
        )
    try:
        values = json.loads(_unb64(encoded))
    except (binascii.Error, ValueError):  # cannot happen for a token whose MAC holds
        values = None
    if not (
        isinstance(values, list)
        and len(values) == len(kinds)
        and all(_issued(value, kind) for value, kind in zip(values, kinds, strict=True))
    ):
        raise InputValidationError(f"continuationToken {given!r} is not one this API issued")
    return tuple(values)


def _issued(value: object, kind: type[str] | type[int]) -> bool:
    """Whether ``value`` can be a sort key value of ``kind``: an id, an artifact name, or a
    time the store can hold. Only a leaked HMAC key could bring anything else this far; the
    store must still never see it (a 500)."""
    if isinstance(value, str):
        pattern = _NAME if kind is Name else _ID if kind is str else None
        return pattern is not None and pattern.fullmatch(value) is not None
    # exactly an int: a bool is an int to isinstance, never to a sort key
    return kind is int and type(value) is int and -(2**63) <= value < 2**63
