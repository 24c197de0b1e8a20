"""The continuationTokens of every listing (a task group's tasks and a task's dependents by task
id; task queues, provisioners, worker types, workers, a task queue's pending and claimed runs
by their sort keys): base64url of the JSON array of the sort key of the last item a page
returned, like Taskcluster's index-based tokens."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from aiohttp import web

from coordinator.api.errors import InputValidationError
from coordinator.domain.workers import Key, KeyedPage

T = TypeVar("T")

_ID = re.compile(r"[A-Za-z0-9_-]{1,38}")
"""What the ids in sort keys are: task ids, provisionerIds, workerTypes, workerGroups and
workerIds."""


def token(key: Key) -> str:
    """The continuationToken of a page that ended on ``key``."""
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


def page_body(name: str, page: KeyedPage[T], render: Callable[[T], Any]) -> dict[str, Any]:
    """``{<name>: [rendered items], continuationToken?}``: a page as the API answers it."""
    body: dict[str, Any] = {name: [render(item) for item in page.items]}
    if page.next_key is not None:
        body["continuationToken"] = token(page.next_key)
    return body


def after(request: web.Request, kinds: Sequence[type[str] | type[int]]) -> Key | None:
    """The key the request's continuationToken names, whose values are of ``kinds``; ``None``
    for the first page.

    :raises InputValidationError: a token this API did not issue for this listing.
    """
    given = request.query.get("continuationToken")
    if not given:
        return None
    try:
        values = json.loads(base64.urlsafe_b64decode(given + "=" * (-len(given) % 4)))
    except (binascii.Error, ValueError):  # not base64, not UTF-8, not JSON
        values = None
    if not (
        isinstance(values, list)
        and len(values) == len(kinds)
        and all(_issued(value, kind) for value, kind in zip(values, kinds, strict=True))
    ):
        raise InputValidationError(f"continuationToken {given!r} is not one this API issued")
    return tuple(values)


def _issued(value: object, kind: type[str] | type[int]) -> bool:
    """Whether ``value`` can be a sort key value of ``kind``: an id, or a time the store can
    hold (a forged one would fail in the store, a 500)."""
    if isinstance(value, str):
        return kind is str and _ID.fullmatch(value) is not None
    # exactly an int: a bool is an int to isinstance, never to a sort key
    return kind is int and type(value) is int and -(2**63) <= value < 2**63
