"""Unit tests of the pure artifact rules (:mod:`coordinator.domain.artifacts`): Taskcluster's
createArtifact checks in their order and with their messages, the rules for repeated
requests, one step of link following and latest-run resolution.

Tasks are built as the coordinator builds them: a createTask body normalised by
:mod:`coordinator.domain.definitions`, then the :mod:`coordinator.domain.lifecycle`
transitions. Times are epoch milliseconds counted from ``T0``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from coordinator.domain import lifecycle
from coordinator.domain.artifacts import (
    DEFAULT_CONTENT_TYPE,
    Artifact,
    ArtifactExpired,
    check_listed_run,
    check_name,
    compatible,
    follow,
    latest_run_id,
    new_artifact,
    replacement,
)
from coordinator.domain.definitions import normalise
from coordinator.domain.errors import Conflict, InputError, NotFound
from coordinator.domain.records import TaskRecord, from_iso, record_from_definition, to_iso
from devharness.tasks import task_definition

TASK_ID = "fN1LcKYkTkC7C3Fh6NtB2A"
MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
T0 = from_iso("2026-03-01T12:00:00.000Z")
TASK_EXPIRES = T0 + 30 * DAY
TIMING = lifecycle.Timing(claim_timeout_ms=20 * MINUTE)
CLAIMED = T0 + MINUTE
NOW = T0 + 10 * MINUTE

S3: dict[str, Any] = {
    "storageType": "s3",
    "expires": to_iso(T0 + DAY),
    "contentType": "text/plain",
}


# --- tasks in each state ---------------------------------------------------------------------


def pending() -> TaskRecord:
    """A task created at ``T0``: run 0 pending, never claimed."""
    body = task_definition(T0, expires=to_iso(TASK_EXPIRES))
    definition = normalise(TASK_ID, body, now=T0, max_deadline_ms=5 * DAY)
    return lifecycle.create(record_from_definition(TASK_ID, definition), now=T0).record


def running() -> TaskRecord:
    """Run 0 claimed at ``CLAIMED`` by worker wg/w1."""
    return lifecycle.claim(
        pending(), run_id=0, worker_group="wg", worker_id="w1", now=CLAIMED, timing=TIMING
    ).record


def resolved(state: str, reason: str, *, at: int) -> TaskRecord:
    """Run 0 claimed, then reported ``state``/``reason`` at ``at``."""
    return lifecycle.report(
        running(), run_id=0, state=state, reason=reason, now=at, timing=TIMING
    ).record


def create(task: TaskRecord | None, body: dict[str, Any], **kwargs: Any) -> Artifact:
    """new_artifact for run 0 of ``task``, named ``public/a.txt``, at ``NOW``, unless
    ``kwargs`` say otherwise."""
    args: dict[str, Any] = {"task_id": TASK_ID, "run_id": 0, "name": "public/a.txt", "now": NOW}
    return new_artifact(task, body=body, **{**args, **kwargs})


def stored(**fields: Any) -> Artifact:
    """An s3 artifact as stored, with ``fields`` replaced."""
    return replace(create(running(), S3), **fields)


# --- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["a", "public/logs/live_backing.log", " ~", "x" * 1024, "../..//%2F?#"]
)
def test_check_name_accepts_1_to_1024_printable_ascii_characters(name: str) -> None:
    check_name(name)


@pytest.mark.parametrize("name", ["", "x" * 1025, "tab\there", "new\nline", "é", "\x7f"])
def test_check_name_refuses_anything_else(name: str) -> None:
    with pytest.raises(InputError, match=r"is not valid: it must be 1 to 1024 printable ASCII"):
        check_name(name)


def test_new_artifact_checks_the_name_first() -> None:
    with pytest.raises(InputError, match="artifact name 'bad\\\\n' is not valid"):
        create(None, {**S3, "storageType": "object"}, name="bad\n")


# --- createArtifact's checks, in order -------------------------------------------------------


def test_object_storage_is_refused_before_any_other_check() -> None:
    with pytest.raises(InputError, match=r"^storageType object is not supported here: use s3$"):
        create(None, {**S3, "storageType": "object", "expires": to_iso(T0 - DAY)})


def test_an_unknown_storage_type_is_refused() -> None:
    with pytest.raises(InputError, match=r"storageType 'azure' is not one of"):
        create(running(), {**S3, "storageType": "azure"})


def test_expires_more_than_15_minutes_past_is_refused_before_the_task_is_looked_at() -> None:
    with pytest.raises(InputError, match=r"^Expires must be in the future$"):
        create(None, {**S3, "expires": to_iso(NOW - 15 * MINUTE - 1)})
    # 15 minutes of clock-skew slack
    assert create(running(), {**S3, "expires": to_iso(NOW - 15 * MINUTE)}).expires == (
        NOW - 15 * MINUTE
    )


def test_expires_without_a_time_zone_is_refused() -> None:
    with pytest.raises(InputError, match=r"expires '2026-03-02T00:00:00' is not a date-time"):
        create(running(), {**S3, "expires": "2026-03-02T00:00:00"})


def test_a_missing_task_is_an_input_error() -> None:
    with pytest.raises(InputError, match=r"^Task not found$"):
        create(None, S3)


@pytest.mark.parametrize("run_id", [1, -1])
def test_a_missing_run_is_an_input_error(run_id: int) -> None:
    with pytest.raises(InputError, match=r"^Run not found$"):
        create(running(), S3, run_id=run_id)


def test_a_run_never_claimed_is_refused() -> None:
    with pytest.raises(
        InputError, match=r"^Run was not claimed by a worker and so no artifacts can exist$"
    ):
        create(pending(), S3)


def test_a_cancelled_pending_run_has_no_worker_either() -> None:
    cancelled = lifecycle.cancel(pending(), now=NOW).record
    with pytest.raises(InputError, match=r"^Run was not claimed by a worker"):
        create(cancelled, S3)


def test_expires_after_the_task_is_refused_naming_both_times() -> None:
    late = TASK_EXPIRES + 1
    with pytest.raises(InputError) as refused:
        create(running(), {**S3, "expires": to_iso(late)})
    assert str(refused.value) == (
        f"Artifact expires ({to_iso(late)}) after the task expiration {to_iso(TASK_EXPIRES)} "
        "(task.expires < expires) - this is not allowed, artifacts may not expire after the "
        "task they belong to expires"
    )
    # equal is fine: scriptworker sends exactly the task's expires
    assert create(running(), {**S3, "expires": to_iso(TASK_EXPIRES)}).expires == TASK_EXPIRES


def test_the_expiry_check_comes_before_the_run_state_check() -> None:
    completed = resolved("completed", "completed", at=NOW)
    with pytest.raises(InputError, match="after the task expiration"):
        create(completed, {**S3, "expires": to_iso(TASK_EXPIRES + 1)})


@pytest.mark.parametrize(("state", "reason"), [("completed", "completed"), ("failed", "failed")])
def test_completed_and_failed_runs_are_a_conflict_with_the_task_status(
    state: str, reason: str
) -> None:
    task = resolved(state, reason, at=NOW - MINUTE)
    with pytest.raises(Conflict) as refused:
        create(task, S3)
    message = str(refused.value)
    prefix = (
        "Artifacts cannot be created for a task after it is resolved, unless it is resolved "
        "'exception', and even in this case only up to 25 min past resolution.This to ensure "
        "that artifacts have been uploaded before a task is 'completed' and output is consumed "
        "by a dependent task\n\nTask status: "
    )
    assert message.startswith(prefix)
    assert json.loads(message[len(prefix) :]) == task.status()


def test_an_exception_run_takes_artifacts_for_25_minutes_after_it_resolved() -> None:
    resolved_at = NOW
    task = resolved("exception", "malformed-payload", at=resolved_at)
    grace_end = resolved_at + 25 * MINUTE
    assert create(task, S3, now=grace_end - 1).name == "public/a.txt"
    with pytest.raises(Conflict, match=r"^Artifacts cannot be created for a task after it is"):
        create(task, S3, now=grace_end)


def test_a_retried_exception_run_still_takes_artifacts_though_a_new_run_is_pending() -> None:
    task = resolved("exception", "worker-shutdown", at=NOW)
    assert [run.state for run in task.runs] == ["exception", "pending"]
    assert create(task, S3, now=NOW + MINUTE).run_id == 0
    with pytest.raises(InputError, match=r"^Run was not claimed"):
        create(task, S3, run_id=1)


# --- what a request creates --------------------------------------------------------------------


def test_an_s3_artifact_starts_without_upload_state_and_keeps_its_declared_length() -> None:
    artifact = create(running(), {**S3, "contentLength": 12})
    assert artifact == Artifact(
        task_id=TASK_ID,
        run_id=0,
        name="public/a.txt",
        storage_type="s3",
        content_type="text/plain",
        expires=T0 + DAY,
        details={},
        created=NOW,
        content_length=12,
    )
    assert artifact.key == (TASK_ID, 0, "public/a.txt")
    assert not artifact.uploaded
    assert artifact.to_api() == {
        "storageType": "s3",
        "name": "public/a.txt",
        "expires": to_iso(T0 + DAY),
        "contentType": "text/plain",
        "contentLength": 12,
    }


def test_an_uploaded_s3_artifact_shows_the_uploaded_length() -> None:
    artifact = stored(details={"uploaded": True, "contentLength": 5, "contentEncoding": None})
    assert artifact.uploaded
    assert artifact.to_api()["contentLength"] == 5
    assert "contentLength" not in stored().to_api()


@pytest.mark.parametrize(
    ("body", "details", "content_type"),
    [
        (
            {"storageType": "reference", "url": "https://x.example/a", "contentType": "a/b"},
            {"url": "https://x.example/a"},
            "a/b",
        ),
        ({"storageType": "link", "artifact": "public/b"}, {"artifact": "public/b"}, None),
        (
            {"storageType": "error", "reason": "file-missing-on-worker", "message": "gone"},
            {"reason": "file-missing-on-worker", "message": "gone"},
            None,
        ),
    ],
)
def test_other_storage_types_keep_their_details_and_default_the_content_type(
    body: dict[str, Any], details: dict[str, Any], content_type: str | None
) -> None:
    artifact = create(running(), {**body, "expires": to_iso(T0 + DAY)})
    assert artifact.storage_type == body["storageType"]
    assert artifact.details == details
    assert artifact.content_type == (content_type or DEFAULT_CONTENT_TYPE)
    assert artifact.content_length is None
    assert not artifact.uploaded


# --- repeated requests -------------------------------------------------------------------------


def test_an_identical_repeat_is_compatible_and_extends_expires() -> None:
    original = stored(details={"uploaded": True, "contentLength": 5, "contentEncoding": "gzip"})
    repeat = create(running(), {**S3, "expires": to_iso(T0 + 2 * DAY)}, now=NOW + HOUR)
    assert compatible(original, repeat)
    kept = replacement(original, repeat)
    # the upload state, created and declared length stay; expires moves on
    assert kept == replace(original, expires=T0 + 2 * DAY)


def test_a_shorter_expires_is_a_conflict_naming_the_original() -> None:
    original = stored()
    repeat = create(running(), {**S3, "expires": to_iso(T0 + DAY - 1)})
    assert not compatible(original, repeat)
    with pytest.raises(Conflict) as refused:
        replacement(original, repeat)
    prefix = (
        "Artifact already exists with different properties, and none of the allowed "
        "exceptions apply: "
    )
    message = str(refused.value)
    assert message.startswith(prefix)
    assert json.loads(message[len(prefix) :]) == {
        "storageType": "s3",
        "contentType": "text/plain",
        "expires": to_iso(T0 + DAY),
    }
    assert '{\n  "storageType": "s3",\n' in message  # JSON.stringify(value, null, 2)


def test_a_different_content_type_is_a_conflict_except_for_a_link() -> None:
    original = create(
        running(),
        {**S3, "storageType": "reference", "url": "https://x.example/"},
    )
    other_type = replace(original, content_type="application/json")
    assert not compatible(original, other_type)
    with pytest.raises(Conflict, match=r"^Artifact already exists with different properties"):
        replacement(original, other_type)
    link = create(running(), {"storageType": "link", "artifact": "b", "expires": S3["expires"]})
    assert link.content_type == DEFAULT_CONTENT_TYPE
    assert compatible(original, link)


def test_a_reference_may_change_its_url_and_become_a_link() -> None:
    reference = {"storageType": "reference", "url": "https://x.example/1", "contentType": "a/b"}
    original = create(running(), {**reference, "expires": S3["expires"]})
    moved = create(running(), {**reference, "url": "https://x.example/2", "expires": S3["expires"]})
    assert replacement(original, moved).details == {"url": "https://x.example/2"}

    link = create(running(), {"storageType": "link", "artifact": "b", "expires": S3["expires"]})
    became = replacement(original, link)
    assert (became.storage_type, became.details, became.content_type) == (
        "link",
        {"artifact": "b"},
        "a/b",
    )


LINK_B = {"storageType": "link", "artifact": "b"}
ERROR_M = {"storageType": "error", "reason": "file-missing-on-worker", "message": "m"}
BINARY = {"contentType": DEFAULT_CONTENT_TYPE}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (LINK_B, {**LINK_B, "artifact": "c"}),
        (ERROR_M, {**ERROR_M, "message": "other"}),
        (LINK_B, {"storageType": "reference", "url": "https://x.example/", **BINARY}),
        ({"storageType": "s3", **BINARY}, LINK_B),
        (ERROR_M, {"storageType": "s3", **BINARY}),
    ],
)
def test_other_changes_are_conflicts(first: dict[str, Any], second: dict[str, Any]) -> None:
    expires = {"expires": S3["expires"]}
    original = create(running(), {**first, **expires})
    repeat = create(running(), {**second, **expires})
    assert original.content_type == repeat.content_type
    assert not compatible(original, repeat)
    with pytest.raises(Conflict, match="none of the allowed exceptions apply"):
        replacement(original, repeat)


def test_an_identical_link_or_error_repeat_is_compatible() -> None:
    for body in (LINK_B, ERROR_M):
        original = create(running(), {**body, "expires": S3["expires"]})
        assert replacement(original, create(running(), {**body, "expires": S3["expires"]})) == (
            original
        )


# --- following links ---------------------------------------------------------------------------


def link(name: str, target: str) -> Artifact:
    return stored(name=name, storage_type="link", details={"artifact": target})


def test_follow_ends_at_an_artifact_that_is_no_link() -> None:
    assert follow(stored(), names=["public/a.txt"], now=NOW) is None


def test_follow_names_a_links_target() -> None:
    assert follow(link("a", "b"), names=["a"], now=NOW) == "b"


def test_follow_of_nothing_is_not_found() -> None:
    with pytest.raises(NotFound, match=r"^Artifact not found$"):
        follow(None, names=["a"], now=NOW)


def test_follow_of_an_expired_artifact_is_expired_from_the_millisecond_after() -> None:
    artifact = stored(expires=NOW)
    assert follow(artifact, names=["a"], now=NOW) is None
    with pytest.raises(ArtifactExpired, match=r"^Artifact expired$"):
        follow(artifact, names=["a"], now=NOW + 1)


def test_follow_detects_a_cycle_back_to_any_name_visited() -> None:
    with pytest.raises(InputError, match=r"^Artifact leads to a link cycle$"):
        follow(link("a", "a"), names=["a"], now=NOW)
    with pytest.raises(InputError, match=r"^Artifact leads to a link cycle$"):
        follow(link("c", "a"), names=["a", "b", "c"], now=NOW)


def test_a_chain_of_30_links_resolves() -> None:
    chain = {f"l{i}": link(f"l{i}", f"l{i + 1}") for i in range(30)}
    chain["l30"] = stored(name="l30")
    names = ["l0"]
    while (target := follow(chain[names[-1]], names=names, now=NOW)) is not None:
        names.append(target)
    assert names == [f"l{i}" for i in range(31)]


# --- which run --------------------------------------------------------------------------------


def test_latest_run_id_is_the_last_run() -> None:
    assert latest_run_id(running()) == 0
    assert latest_run_id(resolved("exception", "worker-shutdown", at=NOW)) == 1


def test_latest_run_id_of_a_missing_task_or_one_without_runs_is_not_found() -> None:
    with pytest.raises(NotFound, match=r"^Task not found$"):
        latest_run_id(None)
    unscheduled = pending().replace(runs=())
    with pytest.raises(NotFound, match=r"^Task doesn't have any runs$"):
        latest_run_id(unscheduled)


def test_check_listed_run_accepts_runs_up_to_the_latest_pending_ones_included() -> None:
    retried = resolved("exception", "worker-shutdown", at=NOW)
    check_listed_run(retried, task_id=TASK_ID, run_id=0)
    check_listed_run(retried, task_id=TASK_ID, run_id=1)
    with pytest.raises(
        NotFound, match=rf"^Task with taskId: `{TASK_ID}` has no run with runId: 2$"
    ):
        check_listed_run(retried, task_id=TASK_ID, run_id=2)
    with pytest.raises(NotFound, match=r"has no run with runId: -1$"):
        check_listed_run(retried, task_id=TASK_ID, run_id=-1)
    with pytest.raises(NotFound, match=r"^Task not found$"):
        check_listed_run(None, task_id=TASK_ID, run_id=0)
