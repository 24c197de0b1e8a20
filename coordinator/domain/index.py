"""The index (Taskcluster's index service): index paths and namespaces, the indexed task, the
rank rule, and what a task's completion indexes. Pure: every time is a parameter (epoch
milliseconds).

* An **index path** is dot-separated words of ``[a-zA-Z0-9_!~*'()%-]``, at most
  :data:`MAX_NAMESPACE_LENGTH` characters. Its last word is the entry's ``name`` and the rest
  its ``namespace`` (``a.b.c`` is ``c`` in ``a.b``; ``c`` alone is ``c`` in the root ``""``).
* **Rank rule**: an entry replaces the one at its path when its rank is at least that one's
  (equal ranks: the later wins), or when that one has expired.
* A **completion** indexes the task at ``<namespace>`` for each of its routes
  ``index.<namespace>``, with ``task.extra.index.{rank, expires, data}`` (defaults ``0``, the
  task's ``expires`` and ``{}``) as Taskcluster's indexer does; a route whose namespace is not
  an index path is skipped, and every route is when ``extra.index`` holds a rank that is not
  an integer or data that is not an object.
* Each **namespace** above an entry (``a``, ``a.b``) is listed while any entry below it may be:
  its expiry is the latest of its entries', rounded up to the next midnight UTC (so one day's
  inserts rewrite it once).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.domain.errors import InputError
from coordinator.domain.records import from_iso

MAX_NAMESPACE_LENGTH = 255
"""Longest index path (Taskcluster's responses allow no longer)."""
MAX_DATA_BYTES = 32 * 1024
"""Largest ``data`` of an entry, as compact JSON (Taskcluster's documented limit)."""
ROUTE_PREFIX = "index."
"""The routes the indexer reads: ``index.<namespace>``."""

INDEX_PATH = re.compile(r"([a-zA-Z0-9_!~*'()%-]+\.)*[a-zA-Z0-9_!~*'()%-]+")
"""Taskcluster's namespace format: non-empty words joined by dots."""

_DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, kw_only=True, slots=True)
class IndexedTask:
    """The task at one index path.

    :param namespace: the path without its last word (``""`` for a top-level entry).
    :param name: the path's last word.
    :param data: a JSON object.
    """

    namespace: str
    name: str
    rank: int
    task_id: str
    data: Mapping[str, Any]
    expires: int

    @property
    def path(self) -> str:
        return join_path(self.namespace, self.name)


@dataclass(frozen=True, kw_only=True, slots=True)
class Namespace:
    """A namespace listed under its ``parent`` (``""``: the root)."""

    parent: str
    name: str
    expires: int

    @property
    def path(self) -> str:
        return join_path(self.parent, self.name)


def is_index_path(text: str) -> bool:
    return len(text) <= MAX_NAMESPACE_LENGTH and INDEX_PATH.fullmatch(text) is not None


def check_index_path(text: str, *, what: str = "index path") -> str:
    """``text`` if it is an index path.

    :raises InputError: naming what is wrong with it.
    """
    if len(text) > MAX_NAMESPACE_LENGTH:
        raise InputError(
            f"{what} is {len(text)} characters long; at most {MAX_NAMESPACE_LENGTH} are allowed"
        )
    if INDEX_PATH.fullmatch(text) is None:
        raise InputError(
            f"{what} {text!r} is not dot-separated non-empty words of letters, digits and _!~*'()%-"
        )
    return text


def split_path(path: str) -> tuple[str, str]:
    """``(namespace, name)`` of an index path: its last word and what comes before it."""
    namespace, _, name = path.rpartition(".")
    return namespace, name


def join_path(namespace: str, name: str) -> str:
    return f"{namespace}.{name}" if namespace and name else namespace + name


def outranks(entry: IndexedTask, stored: IndexedTask, *, now: int) -> bool:
    """Whether ``entry`` replaces ``stored`` at its path (the rank rule)."""
    return entry.rank >= stored.rank or stored.expires <= now


def namespace_expiry(expires: int) -> int:
    """The expiry a namespace gets from an entry expiring at ``expires``: the next midnight
    UTC after it."""
    return (expires // _DAY_MS + 1) * _DAY_MS


def namespaces_above(namespace: str, expires: int) -> list[Namespace]:
    """The namespaces an entry in ``namespace`` keeps listed (its own and every one above
    it, the outermost first), each with :func:`namespace_expiry` of ``expires``."""
    if not namespace:
        return []
    words = namespace.split(".")
    until = namespace_expiry(expires)
    return [
        Namespace(parent=".".join(words[:depth]), name=words[depth], expires=until)
        for depth in range(len(words))
    ]


def entry(path: str, *, task_id: str, rank: object, data: object, expires: int) -> IndexedTask:
    """The entry insertTask stores at ``path``.

    :raises InputError: the path is not an index path, the rank not an integer, or the data
        not an object of at most :data:`MAX_DATA_BYTES`.
    """
    check_index_path(path, what="namespace")
    if type(rank) is float and rank.is_integer():
        rank = int(rank)
    if type(rank) is not int or not -(2**63) <= rank < 2**63:
        raise InputError(f"rank {rank!r} is not an integer (a 64-bit one)")
    if not isinstance(data, Mapping):
        raise InputError("data must be a JSON object")
    size = len(json.dumps(data, separators=(",", ":")).encode()) if data else 2
    if size > MAX_DATA_BYTES:
        raise InputError(f"data is {size} bytes as JSON; at most {MAX_DATA_BYTES} are allowed")
    namespace, name = split_path(path)
    return IndexedTask(
        namespace=namespace, name=name, rank=rank, task_id=task_id, data=data, expires=expires
    )


def completion_entries(task_id: str, definition: Mapping[str, Any]) -> list[IndexedTask]:
    """What the completion of the task of ``definition`` indexes (see the module's opening);
    ``[]`` when it has no ``index.`` route.

    :raises InputError: ``extra.index`` holds what Taskcluster's indexer would not index (a
        rank that is not an integer, data that is not an object, an expiry that is not a
        date-time): then none of the task's routes is indexed.
    """
    paths = [
        route[len(ROUTE_PREFIX) :]
        for route in definition.get("routes", ())
        if route.startswith(ROUTE_PREFIX)
    ]
    paths = [path for path in dict.fromkeys(paths) if is_index_path(path)]
    if not paths:
        return []
    extra = definition.get("extra")
    options = extra.get("index", {}) if isinstance(extra, Mapping) else {}
    if not isinstance(options, Mapping):
        raise InputError("task.extra.index is not an object")
    try:
        expires = from_iso(str(options.get("expires", definition["expires"])))
    except ValueError:
        raise InputError(
            f"task.extra.index.expires {options.get('expires')!r} is not a date-time"
        ) from None
    return [
        entry(
            path,
            task_id=task_id,
            rank=options.get("rank", 0),
            data=options.get("data", {}),
            expires=expires,
        )
        for path in paths
    ]
