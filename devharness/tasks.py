"""The one task-definition factory: the createTask body that the tests, ``scripts/bench`` and
``scripts/soak`` build their tasks from, each changing only the fields it is about."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.domain.records import to_iso
from coordinator.service.clock import wall_clock

HOUR_MS = 3_600_000

METADATA = {
    "name": "test task",
    "description": "made by the test suite",
    "owner": "tests@example.com",
    "source": "https://example.com/tests",
}
"""The metadata of a task unless the caller names its own."""


def task_definition(
    now_ms: int | None = None,
    *,
    lifetime_ms: int = HOUR_MS,
    metadata: Mapping[str, str] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A valid createTask body of task queue ``test-prov/test-wt`` with an empty payload.

    :param now_ms: its ``created``, in epoch milliseconds (default: the wall clock's now).
    :param lifetime_ms: how long after ``created`` its ``deadline`` falls.
    :param metadata: entries that replace those of :data:`METADATA`.
    :param fields: top-level fields that replace (or add to) the body's, as given.
    """
    now = wall_clock() if now_ms is None else now_ms
    body: dict[str, Any] = {
        "provisionerId": "test-prov",
        "workerType": "test-wt",
        "created": to_iso(now),
        "deadline": to_iso(now + lifetime_ms),
        "payload": {},
        "metadata": {**METADATA, **(metadata or {})},
    }
    body.update(fields)
    return body
