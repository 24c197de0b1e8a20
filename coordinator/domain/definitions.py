"""Task-definition normalisation: from a createTask body to the stored definition (the rules
are in docs/protocol.md, "Task definition").

Pure: no clock, no I/O. :func:`normalise` takes a body that already matches the
``create-task-request`` schema and applies the rules a schema cannot express (times relative to
``now``, consistency between fields), fills in every default and returns the definition exactly
as ``GET /task/<taskId>`` serves it. Because normalisation removes every difference of mere
representation, :func:`definitions_match` can decide createTask idempotency by plain
comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from coordinator.domain.errors import InputError
from coordinator.domain.records import DEFAULT_PROJECT_ID, TaskRecord, from_iso, to_iso
from coordinator.domain.task_queues import TaskQueue, canonical_priority

CREATED_TOLERANCE = 15 * 60 * 1000
"""How far ``created`` may be from the server's clock, either way (ms)."""

_MS_PER = (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1000))


def normalise(
    task_id: str, body: Mapping[str, Any], *, now: int, max_deadline_ms: int
) -> dict[str, Any]:
    """The normalised definition of a schema-valid createTask body.

    :param now: the server's time, epoch milliseconds.
    :param max_deadline_ms: how far past ``now`` the deadline may be (ms).
    :raises InputError: saying which rule the body breaks.

    ``payload`` and ``extra`` are shared with ``body``, not copied: neither may be mutated
    afterwards.
    """
    provisioner_id, worker_type = task_queue_of(body)
    created = _time(body, "created")
    deadline = _time(body, "deadline")
    _check_times(created=created, deadline=deadline, now=now, limit=max_deadline_ms)
    # only now: a deadline in year 9999 has no year after it, and was refused just above
    expires = _time(body, "expires") if "expires" in body else _one_year_after(deadline)
    if expires < deadline:
        raise InputError(f"expires {to_iso(expires)} is before deadline {to_iso(deadline)}")

    dependencies: list[str] = list(body.get("dependencies", []))
    routes: list[str] = list(body.get("routes", []))
    scopes: list[str] = list(body.get("scopes", []))
    _check_unique("dependencies", dependencies)
    _check_unique("routes", routes)
    if task_id in dependencies:
        raise InputError(f"task {task_id} can't depend on itself")
    for scope in scopes:
        if scope.endswith("**"):
            raise InputError(
                f"scope {scope!r} ends in '**', which is not allowed: one trailing '*' "
                "already matches every suffix"
            )

    priority: str = body.get("priority", "lowest")
    return {
        "provisionerId": provisioner_id,
        "workerType": worker_type,
        "taskQueueId": str(TaskQueue(provisioner_id, worker_type)),
        "schedulerId": body.get("schedulerId", "-"),
        "projectId": body.get("projectId", DEFAULT_PROJECT_ID),
        "taskGroupId": body.get("taskGroupId", task_id),
        "dependencies": dependencies,
        "requires": body.get("requires", "all-completed"),
        "routes": routes,
        "priority": canonical_priority(priority),
        # JSON Schema counts 5.0 as an integer; store it as one
        "retries": int(body.get("retries", 5)),
        "created": to_iso(created),
        "deadline": to_iso(deadline),
        "expires": to_iso(expires),
        "scopes": scopes,
        **_scheduling(body, deadline=deadline),
        "payload": body["payload"],
        "metadata": dict(body["metadata"]),
        "tags": dict(body.get("tags", {})),
        "extra": body.get("extra", {}),
    }


def definitions_match(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two normalised definitions are the same task, for createTask idempotency.

    Nothing is ignored: normalisation already made defaults explicit, mapped ``normal`` to
    ``lowest``, reconciled ``taskQueueId`` with ``provisionerId``/``workerType`` and put every
    timestamp in one format, and a client repeating a request sends the same ``created``. The
    comparison is JSON equality, not Python's ``==``: ``true`` and ``1`` differ (in Python
    ``True == 1``), while ``1`` and ``1.0`` are the same JSON number. Key order never matters;
    list order always does.
    """
    return _json_equal(a, b)


def _json_equal(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, Sequence) and not isinstance(a, str):
        return (
            isinstance(b, Sequence)
            and not isinstance(b, str)
            and len(a) == len(b)
            and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    return type(a) is type(b) and a == b


def check_dependencies(record: TaskRecord, found: Mapping[str, TaskRecord]) -> None:
    """createTask's dependency rules: each dependency exists and outlives the deadline.

    :param found: the records of (at least) the dependencies that exist.
    :raises InputError: naming the dependencies that break a rule.
    """
    missing = [dep for dep in record.dependencies if dep not in found]
    if missing:
        raise InputError(f"dependencies do not exist: {', '.join(missing)}")
    early = sorted(dep for dep in record.dependencies if found[dep].expires < record.deadline)
    if early:
        raise InputError("dependencies expire before this task's deadline: " + ", ".join(early))


def task_queue_of(body: Mapping[str, Any]) -> tuple[str, str]:
    """``(provisionerId, workerType)`` from either form; both forms given must agree."""
    provisioner_id: str | None = body.get("provisionerId")
    worker_type: str | None = body.get("workerType")
    task_queue_id: str | None = body.get("taskQueueId")
    if task_queue_id is None:
        if provisioner_id is None or worker_type is None:
            raise InputError("the task needs taskQueueId, or provisionerId and workerType")
        return provisioner_id, worker_type
    task_queue = TaskQueue.parse(task_queue_id)
    queue_provisioner, queue_worker_type = task_queue.provisioner_id, task_queue.worker_type
    if provisioner_id not in (None, queue_provisioner):
        raise InputError(
            f"provisionerId {provisioner_id!r} contradicts taskQueueId {task_queue_id!r}"
        )
    if worker_type not in (None, queue_worker_type):
        raise InputError(f"workerType {worker_type!r} contradicts taskQueueId {task_queue_id!r}")
    return queue_provisioner, queue_worker_type


_EARLIEST = from_iso("0001-01-01T00:00:00Z")
_LATEST = from_iso("9999-12-31T23:59:59.999Z")


def _time(body: Mapping[str, Any], field: str) -> int:
    try:
        ms = from_iso(body[field])
    except (TypeError, ValueError):
        raise InputError(f"{field} {body[field]!r} is not a date-time") from None
    if not _EARLIEST <= ms <= _LATEST:
        # an offset can carry 0001-01-01 or 9999-12-31 out of the years UTC can show
        raise InputError(
            f"{field} {body[field]!r} is out of range: in UTC it is not in years 1-9999"
        )
    return ms


def _one_year_after(ms: int) -> int:
    """The same instant a calendar year later; 29 February becomes 1 March, as in
    Taskcluster (JavaScript's ``setFullYear``)."""
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    try:
        later = dt.replace(year=dt.year + 1)
    except ValueError:
        later = dt.replace(year=dt.year + 1, month=3, day=1)
    return ms + round((later - dt).total_seconds() * 1000)


def _check_times(*, created: int, deadline: int, now: int, limit: int) -> None:
    if abs(created - now) > CREATED_TOLERANCE:
        raise InputError(
            f"created {to_iso(created)} is more than 15 minutes from the server's time "
            f"{to_iso(now)}: check the client's clock"
        )
    if deadline <= now:
        raise InputError(f"deadline {to_iso(deadline)} is not in the future (now {to_iso(now)})")
    if deadline < created:
        raise InputError(f"deadline {to_iso(deadline)} is before created {to_iso(created)}")
    if deadline > now + limit:
        raise InputError(
            f"deadline {to_iso(deadline)} is too far in the future: the maximum is "
            f"{_duration(limit)} from now, {to_iso(now + limit)}"
        )


def _scheduling(body: Mapping[str, Any], *, deadline: int) -> dict[str, Any]:
    """The optional scheduling fields, normalised: ``notBefore``, ``retryDelay`` (with its
    default factor), ``retryPriority``, ``claimTimeout``, ``deduplicationKey`` (with its
    ``deduplicationTtl``, default 0) and ``concurrencyKey``; absent ones stay absent."""
    fields: dict[str, Any] = {}
    if "notBefore" in body:
        not_before = _time(body, "notBefore")
        if not_before > deadline:
            raise InputError(
                f"notBefore {to_iso(not_before)} is after the deadline {to_iso(deadline)}: "
                "the task could never run"
            )
        fields["notBefore"] = to_iso(not_before)
    if "retryDelay" in body:
        delay = dict(body["retryDelay"])
        if "base" in delay:
            delay.setdefault("factor", 2)
        fields["retryDelay"] = delay
    if "retryPriority" in body:
        fields["retryPriority"] = canonical_priority(body["retryPriority"])
    if "claimTimeout" in body:
        fields["claimTimeout"] = int(body["claimTimeout"])
    if "deduplicationKey" in body:
        fields["deduplicationKey"] = body["deduplicationKey"]
        fields["deduplicationTtl"] = int(body.get("deduplicationTtl", 0))
    elif "deduplicationTtl" in body:
        raise InputError(
            "deduplicationTtl is given without deduplicationKey: it says how long a resolved "
            "task keeps its key, so add the key or drop the TTL"
        )
    if "concurrencyKey" in body:
        fields["concurrencyKey"] = body["concurrencyKey"]
    return fields


def deduplication_key(definition: Mapping[str, Any]) -> str | None:
    """The normalised definition's ``deduplicationKey``, if it has one."""
    key: str | None = definition.get("deduplicationKey")
    return key


def holds_key(holder: TaskRecord, *, now: int) -> bool:
    """Whether ``holder`` still holds its deduplication key at ``now``: it is unresolved, or
    resolved less than its ``deduplicationTtl`` ago (a rerun makes it unresolved again)."""
    resolved = holder.resolved
    if resolved is None:
        return True
    ttl: int = holder.definition.get("deduplicationTtl", 0)
    return now - resolved < ttl * 1000


def _check_unique(field: str, values: Sequence[str]) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise InputError(f"{field} lists {value!r} more than once")
        seen.add(value)


def _duration(ms: int) -> str:
    """``5 days``, ``90 minutes``, ``1500 ms``: the largest unit that divides ``ms``."""
    for unit, size in _MS_PER:
        if ms % size == 0:
            count = ms // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{ms} ms"
