"""Artifacts (Taskcluster's createArtifact family) as pure values and rules.

An :class:`Artifact` is one row of the store's ``artifacts`` table: its name within a task's
run, how it is stored and when it expires. The rules here are Taskcluster's, with its
messages: which names are valid (:func:`check_name`), what a createArtifact request may
create (:func:`new_artifact`, checked in Taskcluster's order), when a repeated request is
accepted and what it then stores (:func:`compatible`, :func:`replacement`), one step of
following ``link`` artifacts (:func:`follow`) and which run the ``latest`` methods mean
(:func:`latest_run_id`, :func:`check_listed_run`). An :class:`InlineArtifact` is a small s3
artifact a run's report carries, stored with the report (:func:`stored_inline`).

Storage types: ``s3`` (bytes uploaded to the coordinator's blob store after creation),
``reference`` (a URL elsewhere), ``link`` (another artifact of the same run) and ``error`` (a
reason the worker could not upload). ``object`` needs Taskcluster's object service and is
refused. Times are epoch milliseconds, as everywhere (:mod:`coordinator.domain.records`).
Nothing here reads a clock or touches the store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from coordinator.domain.errors import Conflict, DomainError, InputError, NotFound
from coordinator.domain.records import TaskRecord, from_iso, to_iso

StorageType = Literal["s3", "reference", "link", "error"]
STORAGE_TYPES: frozenset[str] = frozenset({"s3", "reference", "link", "error"})

ArtifactKey = tuple[str, int, str]
"""What identifies an artifact: ``(task_id, run_id, name)``."""

DEFAULT_CONTENT_TYPE = "application/binary"
"""The contentType of an artifact whose request names none (link, error), as in Taskcluster."""

MAX_NAME_LENGTH = 1024
MAX_INLINE_BYTES = 64 * 1024
"""The most bytes an artifact carried in a report may have (resolveRuns ``artifacts``)."""
EXPIRES_SLACK_MS = 15 * 60 * 1000
"""How far in the past a new artifact's ``expires`` may lie: clock skew (Taskcluster's)."""
EXCEPTION_GRACE_MS = 25 * 60 * 1000
"""How long after its run resolved ``exception`` a task may still get artifacts (its logs)."""

_NAME = re.compile(rf"[\x20-\x7e]{{1,{MAX_NAME_LENGTH}}}")


class ArtifactExpired(DomainError):
    """The artifact exists but its ``expires`` has passed (Taskcluster's 410
    ResourceExpired)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Artifact:
    """One artifact of one run of a task.

    :param content_type: the contentType the first createArtifact gave; a repeat never
        changes it.
    :param expires: when it expires; a repeat may extend it, never shorten it.
    :param details: per storage type: reference ``{"url"}``, link ``{"artifact"}`` (a name in
        the same run), error ``{"reason", "message"}``; s3 ``{}`` until its bytes are
        uploaded, then ``{"uploaded": true, "contentLength": n, "contentEncoding": str|None}``,
        with ``"inline": true`` when the bytes are in the store's row, not the blob store.
    :param created: when the first createArtifact stored it.
    :param content_length: the contentLength an s3 request declared, ``None`` if none.
    """

    task_id: str
    run_id: int
    name: str
    storage_type: StorageType
    content_type: str
    expires: int
    details: Mapping[str, Any]
    created: int
    content_length: int | None = None

    @property
    def key(self) -> ArtifactKey:
        return (self.task_id, self.run_id, self.name)

    @property
    def uploaded(self) -> bool:
        """Whether its bytes are stored: an s3 artifact once an upload finished."""
        return self.storage_type == "s3" and bool(self.details.get("uploaded"))

    @property
    def inline(self) -> bool:
        """Whether its bytes are in its row (:class:`InlineArtifact`), not the blob store."""
        return self.uploaded and bool(self.details.get("inline"))

    def is_expired(self, now: int) -> bool:
        """Whether getArtifact answers 410 at ``now`` (``expires`` strictly before it)."""
        return self.expires < now

    def to_api(self) -> dict[str, Any]:
        """The artifact record of artifactInfo and the listings: contentLength is the uploaded
        length once known, else the declared one, else absent."""
        out: dict[str, Any] = {
            "storageType": self.storage_type,
            "name": self.name,
            "expires": to_iso(self.expires),
            "contentType": self.content_type,
        }
        length = self.details.get("contentLength") if self.uploaded else self.content_length
        if length is not None:
            out["contentLength"] = length
        return out


def check_name(name: str) -> None:
    """Refuse a name that is not 1 to 1024 printable ASCII characters (``\\x20``-``\\x7e``).

    :raises InputError: naming what is wrong.
    """
    if not _NAME.fullmatch(name):
        raise InputError(
            f"artifact name {name[:100]!r} is not valid: it must be 1 to {MAX_NAME_LENGTH} "
            "printable ASCII characters (\\x20-\\x7e)"
        )


def new_artifact(
    task: TaskRecord | None,
    *,
    task_id: str,
    run_id: int,
    name: str,
    body: Mapping[str, Any],
    now: int,
) -> Artifact:
    """The artifact a createArtifact request makes, or Taskcluster's refusal, checked in its
    order: the name; the storage type; ``expires`` not more than 15 minutes past; the task,
    the run and its worker; ``expires`` not after the task's; the run running (or resolved
    ``exception`` less than 25 minutes ago).

    :param task: the stored task, ``None`` if there is none.
    :param body: the request body, valid against post-artifact-request.json.
    :param now: epoch milliseconds.
    :raises InputError: any check but the run's state; ``object`` storage.
    :raises Conflict: the run is resolved (and not a recent ``exception``).
    """
    check_name(name)
    storage_type = body["storageType"]
    if storage_type == "object":
        raise InputError("storageType object is not supported here: use s3")
    if storage_type not in STORAGE_TYPES:
        raise InputError(f"storageType {storage_type!r} is not one of {sorted(STORAGE_TYPES)}")
    expires = _expires(body["expires"])
    if expires < now - EXPIRES_SLACK_MS:
        raise InputError("Expires must be in the future")
    if task is None:
        raise InputError("Task not found")
    if not 0 <= run_id < len(task.runs):
        raise InputError("Run not found")
    run = task.runs[run_id]
    if not run.worker_group or not run.worker_id:
        raise InputError("Run was not claimed by a worker and so no artifacts can exist")
    if expires > task.expires:
        raise InputError(
            f"Artifact expires ({to_iso(expires)}) after the task expiration "
            f"{to_iso(task.expires)} (task.expires < expires) - this is not allowed, "
            "artifacts may not expire after the task they belong to expires"
        )
    if run.state != "running" and not (
        run.state == "exception"
        and run.resolved is not None
        and run.resolved > now - EXCEPTION_GRACE_MS
    ):
        raise Conflict(
            "Artifacts cannot be created for a task after it is resolved, unless it is "
            "resolved 'exception', and even in this case only up to 25 min past resolution."
            "This to ensure that artifacts have been uploaded before a task is 'completed' "
            "and output is consumed by a dependent task\n\nTask status: " + _js_json(task.status())
        )
    return Artifact(
        task_id=task_id,
        run_id=run_id,
        name=name,
        storage_type=cast(StorageType, storage_type),
        content_type=body.get("contentType", DEFAULT_CONTENT_TYPE),
        expires=expires,
        details=_details(storage_type, body),
        created=now,
        content_length=body.get("contentLength") if storage_type == "s3" else None,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class InlineArtifact:
    """A small s3 artifact carried in a run's report, bytes and all (at most
    :data:`MAX_INLINE_BYTES`): stored in the store's row by the write that resolves the run,
    so it exists exactly when the run's resolution does, without a createArtifact and an
    upload of its own."""

    name: str
    content_type: str
    content_encoding: str | None
    content: bytes


InlineRow = tuple[Artifact, bytes]
"""An inline artifact as the store writes it: the row, and the bytes it holds."""


def stored_inline(task: TaskRecord, run_id: int, inline: InlineArtifact, *, now: int) -> InlineRow:
    """The uploaded s3 artifact ``inline`` becomes in run ``run_id`` of ``task``, expiring
    with the task (createArtifact's default), and its bytes."""
    artifact = Artifact(
        task_id=task.task_id,
        run_id=run_id,
        name=inline.name,
        storage_type="s3",
        content_type=inline.content_type,
        expires=task.expires,
        details={
            "uploaded": True,
            "contentLength": len(inline.content),
            "contentEncoding": inline.content_encoding,
            "inline": True,
        },
        created=now,
        content_length=len(inline.content),
    )
    return artifact, inline.content


def _expires(text: str) -> int:
    try:
        return from_iso(text)
    except ValueError:
        raise InputError(f"expires {text!r} is not a date-time with a time zone") from None


def _details(storage_type: str, body: Mapping[str, Any]) -> dict[str, Any]:
    if storage_type == "reference":
        return {"url": body["url"]}
    if storage_type == "link":
        return {"artifact": body["artifact"]}
    if storage_type == "error":
        return {"reason": body["reason"], "message": body["message"]}
    return {}


def _js_json(value: Any) -> str:
    """``value`` as Taskcluster writes an object into an error message (``JSON.stringify``
    with an indent of 2)."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def compatible(existing: Artifact, new: Artifact) -> bool:
    """Whether a createArtifact request for a name that exists may proceed (Taskcluster's
    rules): the same contentType (a link has none to compare), ``expires`` not earlier, and
    the same storage type with equal details (a reference's URL may change; an s3 artifact's
    details are its upload state, which a request does not give), or a reference becoming a
    link."""
    if new.storage_type != "link" and existing.content_type != new.content_type:
        return False
    if existing.expires > new.expires:
        return False
    if existing.storage_type == new.storage_type:
        return new.storage_type in ("reference", "s3") or existing.details == new.details
    return existing.storage_type == "reference" and new.storage_type == "link"


def replacement(existing: Artifact, new: Artifact) -> Artifact:
    """What a repeated createArtifact stores in place of ``existing``: the new storage type,
    details and ``expires``, the original contentType, created and declared length; an s3
    artifact keeps its upload state.

    :raises Conflict: the request is not :func:`compatible` (Taskcluster's 409).
    """
    if not compatible(existing, new):
        original = {
            "storageType": existing.storage_type,
            "contentType": existing.content_type,
            "expires": to_iso(existing.expires),
        }
        raise Conflict(
            "Artifact already exists with different properties, and none of the allowed "
            "exceptions apply: " + _js_json(original)
        )
    details = existing.details if new.storage_type == "s3" else new.details
    return replace(existing, storage_type=new.storage_type, details=details, expires=new.expires)


def follow(artifact: Artifact | None, *, names: Sequence[str], now: int) -> str | None:
    """One step of resolving an artifact through its links (getArtifact, artifact and their
    ``latest`` forms): the name to load next, or ``None`` when ``artifact`` is the end.

    The caller keeps ``names``, every name visited so far with the one it just loaded (which
    the caller's scopes must all cover), and loads the next name in the same run; a chain
    ends because no name is visited twice.

    :param artifact: what the store holds under the last of ``names``, ``None`` if nothing.
    :raises NotFound: ``Artifact not found``.
    :raises ArtifactExpired: ``Artifact expired``.
    :raises InputError: ``Artifact leads to a link cycle``.
    """
    if artifact is None:
        raise NotFound("Artifact not found")
    if artifact.is_expired(now):
        raise ArtifactExpired("Artifact expired")
    if artifact.storage_type != "link":
        return None
    target: str = artifact.details["artifact"]
    if target in names:
        raise InputError("Artifact leads to a link cycle")
    return target


def latest_run_id(task: TaskRecord | None) -> int:
    """The run the ``latest`` methods (getLatestArtifact, listLatestArtifacts, ...) mean.

    :raises NotFound: ``Task not found``, ``Task doesn't have any runs``.
    """
    if task is None:
        raise NotFound("Task not found")
    if not task.runs:
        raise NotFound("Task doesn't have any runs")
    return len(task.runs) - 1


def check_listed_run(task: TaskRecord | None, *, task_id: str, run_id: int) -> None:
    """Refuse listArtifacts for a run that does not exist (a pending run lists, empty).

    :raises NotFound: as :func:`latest_run_id`, or naming the task and run.
    """
    if not 0 <= run_id <= latest_run_id(task):
        raise NotFound(f"Task with taskId: `{task_id}` has no run with runId: {run_id}")
