"""Hooks (Taskcluster's hooks service): the hook record, its schedule, its fires, and the task a
fire renders. Pure: every time is a parameter (epoch milliseconds).

* A **schedule** is a list of cron patterns read in UTC as Taskcluster's cron-parser reads
  them: five fields, or six with the seconds *first*; ``croniter`` parses them
  (``second_at_beginning``). :func:`next_due` is the earliest time after a reference that any
  pattern names; a hook without patterns is never due.
* A scheduled fire's **taskId** is derived from the hook and the due time
  (:func:`fire_task_id`), and its task is rendered with ``now`` = the due time: every replica
  that fires the same due time asks for the same task under the same id, which createTask
  makes idempotent. So each due time creates exactly one task, whoever fires it and however
  often a crash makes it fire again.
* The **task template** is rendered by the ``json-e`` package with
  ``{firedBy, taskId, payload, now}`` (and ``clientId`` for triggerHook), then given
  Taskcluster's defaults (:func:`render_task`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import jsone
import jsonschema
import slugid
from croniter import croniter
from croniter.croniter import CroniterError
from jsone.shared import InterpreterError

from coordinator.domain.errors import InputError
from coordinator.domain.records import from_iso, to_iso

FiredBy = Literal["schedule", "triggerHook", "triggerHookWithToken", "pulseMessage"]
FireResult = Literal["success", "error"]

SLUGID = re.compile(r"[A-Za-z0-9_-]{8}[Q-T][A-Za-z0-9_-][CGKOSWaeimquy26-][A-Za-z0-9_-]{10}[AQgw]")
"""A taskId (a v4 UUID as a slugid), as createTask's schema has it."""

DEFAULT_TRIGGER_SCHEMA: Mapping[str, Any] = {"type": "object", "additionalProperties": False}
"""Taskcluster's default ``triggerSchema``: only an empty payload."""

MAX_ERROR_CHARS = 128 * 1024
"""A last fire's error text is cut to this many characters (Taskcluster's limit)."""

DEADLINE_MS = 24 * 3600 * 1000
EXPIRES_MS = 30 * DEADLINE_MS
"""What a rendered task gets when its template sets no deadline or expires (Taskcluster's
``1 day`` and ``1 month``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Hook:
    """One stored hook.

    :param scopes: the scopes of the client that last created or updated it: the scopes its
        tasks are created with (Taskcluster's role ``hook-id:<hookGroupId>/<hookId>``).
    :param next_due: when the schedule next fires (epoch ms), ``None`` without a schedule.
    :param version: the compare-and-set version of the row (1 when created).
    """

    hook_group_id: str
    hook_id: str
    metadata: Mapping[str, Any]
    task: Mapping[str, Any]
    schedule: tuple[str, ...]
    trigger_schema: Mapping[str, Any]
    bindings: tuple[Mapping[str, Any], ...] = ()
    scopes: tuple[str, ...] = ()
    trigger_token: str = field(default_factory=slugid.nice)
    next_due: int | None = None
    version: int = 1

    def definition(self) -> dict[str, Any]:
        """The hook as Taskcluster answers it (``hook-definition``)."""
        return {
            "hookGroupId": self.hook_group_id,
            "hookId": self.hook_id,
            "metadata": dict(self.metadata),
            "task": dict(self.task),
            "schedule": list(self.schedule),
            "triggerSchema": dict(self.trigger_schema),
            "bindings": [dict(binding) for binding in self.bindings],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class LastFire:
    """One fire of a hook and how it went (``error`` is empty on success)."""

    hook_group_id: str
    hook_id: str
    fired_by: FiredBy
    task_id: str
    task_create_time: int
    result: FireResult
    error: str = ""


def hook_from_request(
    hook_group_id: str,
    hook_id: str,
    body: Mapping[str, Any],
    *,
    scopes: Sequence[str],
    now: int,
    existing: Hook | None = None,
) -> Hook:
    """The hook a (schema-valid) createHook or updateHook body defines, scheduled from
    ``now``. An update (``existing``) keeps the hook's trigger token and, when the body has
    none, its bindings.

    :raises InputError: naming the field: ids in the body that differ from the path's, a
        schedule cron cannot read, a task that is not a JSON-e template, a triggerSchema that is
        not a JSON Schema.
    """
    for name, value in (("hookGroupId", hook_group_id), ("hookId", hook_id)):
        if name in body and body[name] != value:
            raise InputError(
                f"{name}: {body[name]!r} in the body differs from {value!r} in the path"
            )
    schedule = tuple(body.get("schedule", ()))
    check_schedule(schedule)
    check_template(body["task"])
    trigger_schema = body.get("triggerSchema", DEFAULT_TRIGGER_SCHEMA)
    check_trigger_schema(trigger_schema)
    bindings = body.get("bindings")
    if bindings is None:
        bindings = existing.bindings if existing is not None else ()
    hook = Hook(
        hook_group_id=hook_group_id,
        hook_id=hook_id,
        metadata={"emailOnError": True, **body["metadata"]},
        task=body["task"],
        schedule=schedule,
        trigger_schema=trigger_schema,
        bindings=tuple(bindings),
        scopes=tuple(scopes),
        next_due=next_due(schedule, now),
    )
    if existing is None:
        return hook
    return dataclasses.replace(hook, trigger_token=existing.trigger_token, version=existing.version)


def check_trigger_schema(schema: Mapping[str, Any]) -> None:
    """:raises InputError: ``schema`` is not a JSON Schema (of its own ``$schema``'s draft,
    draft 7 without one, as Taskcluster's Ajv reads it)."""
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    try:
        validator.check_schema(dict(schema))
    except jsonschema.SchemaError as error:
        where = "".join(f"[{part!r}]" for part in error.absolute_path)
        raise InputError(
            f"triggerSchema{where} is not a valid JSON schema: {error.message}"
        ) from None


def check_payload(schema: Mapping[str, Any], payload: Any) -> None:
    """:raises InputError: ``payload`` does not match the hook's ``triggerSchema``, naming
    every place that does not."""
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    errors = sorted(
        validator(schema, format_checker=validator.FORMAT_CHECKER).iter_errors(payload),
        key=lambda error: list(map(str, error.absolute_path)),
    )
    if errors:
        raise InputError(
            "payload does not match the hook's triggerSchema: "
            + "; ".join(
                "payload"
                + "".join(f"[{part!r}]" for part in error.absolute_path)
                + f": {error.message}"
                for error in errors
            )
        )


def _cron(pattern: str, start: datetime) -> croniter:
    """``pattern`` as cron-parser reads it: 5 fields, or 6 with the seconds first.

    :raises InputError: naming the pattern and what is wrong with it.
    """
    if not pattern.startswith("@") and len(pattern.split()) > 6:
        raise InputError(f"{pattern!r} has more than 6 fields (seconds first, then 5)")
    try:
        return croniter(pattern, start, second_at_beginning=True)
    except (CroniterError, ValueError, KeyError) as error:
        raise InputError(f"{pattern!r} is not a cron pattern: {error}") from None


def check_schedule(schedule: Sequence[str]) -> None:
    """:raises InputError: naming ``schedule[i]``, the first pattern cron cannot read."""
    start = datetime(2000, 1, 1, tzinfo=UTC)
    for index, pattern in enumerate(schedule):
        try:
            _cron(pattern, start).get_next(datetime)
        except InputError as error:
            raise InputError(f"schedule[{index}]: {error}") from None
        except (CroniterError, ValueError) as error:  # a pattern that never occurs
            raise InputError(f"schedule[{index}]: {pattern!r} never occurs: {error}") from None


def next_due(schedule: Sequence[str], after: int) -> int | None:
    """The earliest time strictly after ``after`` (epoch ms) that a pattern of ``schedule``
    names, on whole seconds; ``None`` for an empty schedule."""
    start = datetime.fromtimestamp(after / 1000, UTC)
    times = [_cron(pattern, start).get_next(datetime) for pattern in schedule]
    return None if not times else int(min(times).timestamp() * 1000)


def fire_task_id(hook_group_id: str, hook_id: str, due: int) -> str:
    """The taskId of the scheduled fire of the hook at ``due``: the same for every replica, a
    nice slugid (a version-4 UUID shape with the top bit clear) of a SHA-256 of all three."""
    digest = bytearray(hashlib.sha256(f"{hook_group_id}\0{hook_id}\0{due}".encode()).digest())
    digest[0] &= 0x7F
    return str(slugid.encode(uuid.UUID(bytes=bytes(digest[:16]), version=4)))


def template_context(
    *, fired_by: FiredBy, task_id: str, now: int, payload: Any, client_id: str | None = None
) -> dict[str, Any]:
    """The JSON-e context a template is rendered with."""
    context: dict[str, Any] = {
        "firedBy": fired_by,
        "taskId": task_id,
        "now": to_iso(now),
        "payload": payload,
    }
    if client_id is not None:
        context["clientId"] = client_id
    return context


def check_template(template: Mapping[str, Any]) -> None:
    """Render ``template`` once with a sample context.

    :raises InputError: the template is not JSON-e (an unknown ``$`` operator, an expression
        that does not parse, a construct of the wrong shape). What only the payload decides
        (a property a sample payload lacks) is left to each fire.
    """
    context = template_context(
        fired_by="triggerHook", task_id=slugid.nice(), now=0, payload={}, client_id="-"
    )
    try:
        jsone.render(dict(template), context)
    except InterpreterError:
        pass
    # json-e raises its own errors, and for some malformed expressions Python's (an
    # AttributeError from its interpreter): either way the template is refused.
    except Exception as error:
        raise InputError(f"task: not a valid JSON-e template: {error}") from None


def render_task(template: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any] | None:
    """The task definition a fire creates, or ``None`` when the template renders to nothing
    (a fire that declines). Taskcluster's defaults fill what the template leaves out:
    ``created`` = ``now``, ``deadline`` a day and ``expires`` a month later, and
    ``taskGroupId`` the taskId (a decision task's convention).

    :raises InputError: the template fails to render, or renders to something not an object.
    """
    try:
        task = jsone.render(dict(template), dict(context))
    except Exception as error:  # as in check_template: json-e's errors, or Python's
        raise InputError(f"the task template failed to render: {error}") from None
    if task is None:
        return None
    if not isinstance(task, dict):
        raise InputError(f"the task template rendered to {type(task).__name__}, not an object")
    now = from_iso(context["now"])
    task.setdefault("created", to_iso(now))
    task.setdefault("deadline", to_iso(now + DEADLINE_MS))
    task.setdefault("expires", to_iso(now + EXPIRES_MS))
    task.setdefault("taskGroupId", context["taskId"])
    return task


def error_text(error: BaseException | str) -> str:
    """A last fire's error: the message, at most :data:`MAX_ERROR_CHARS` characters."""
    return str(error)[:MAX_ERROR_CHARS]
