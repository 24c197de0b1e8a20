"""Task-definition normalisation and createTask idempotency (coordinator.domain.definitions)."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from coordinator.domain import lifecycle
from coordinator.domain.definitions import definitions_match, holds_key, normalise
from coordinator.domain.errors import InputError
from coordinator.domain.json_text import compact, exact_loads
from coordinator.domain.records import from_iso, record_from_definition, to_iso
from devharness.tasks import task_definition

TASK_ID = "Jgj3vp06TJCopdyHUgtfww"
GROUP_ID = "UIEP9rD1THSeI8Dzu24stg"
DEP_A = "MPQxWTCZTUizg7Xnw3JH2w"
DEP_B = "Rpg6yQccTZO2SjzJt8whkA"

NOW = from_iso("2026-05-01T12:00:00.000Z")
MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
MAX_DEADLINE = 5 * DAY


def at(ms: int) -> str:
    return to_iso(ms)


def minimal(**changes: Any) -> dict[str, Any]:
    """The smallest valid createTask body, created at ``NOW`` with a deadline a day later;
    ``changes`` replace its fields."""
    fields = {"provisionerId": "proj", "workerType": "wt", "payload": {"command": ["true"]}}
    return task_definition(NOW, lifetime_ms=DAY, **{**fields, **changes})


def norm(body: dict[str, Any], *, task_id: str = TASK_ID) -> dict[str, Any]:
    return normalise(task_id, body, now=NOW, max_deadline_ms=MAX_DEADLINE)


def rejects(body: dict[str, Any], *, task_id: str = TASK_ID) -> str:
    with pytest.raises(InputError) as info:
        norm(body, task_id=task_id)
    return str(info.value)


def test_minimal_body_gets_every_default() -> None:
    assert norm(minimal()) == {
        "provisionerId": "proj",
        "workerType": "wt",
        "taskQueueId": "proj/wt",
        "schedulerId": "-",
        "projectId": "none",
        "taskGroupId": TASK_ID,
        "dependencies": [],
        "requires": "all-completed",
        "routes": [],
        "priority": "lowest",
        "retries": 5,
        "created": "2026-05-01T12:00:00.000Z",
        "deadline": "2026-05-02T12:00:00.000Z",
        "expires": "2027-05-02T12:00:00.000Z",
        "scopes": [],
        "payload": {"command": ["true"]},
        "metadata": minimal()["metadata"],
        "tags": {},
        "extra": {},
    }


def test_maximal_body_keeps_every_given_value() -> None:
    body = minimal(
        schedulerId="sched",
        taskGroupId=GROUP_ID,
        dependencies=[DEP_A, DEP_B],
        requires="all-resolved",
        routes=["index.a", "notify.b"],
        priority="very-high",
        retries=0,
        expires=at(NOW + 30 * DAY),
        scopes=["queue:foo", "secrets:get:a*"],
        tags={"purpose": "test"},
        extra={"x": [1, {"y": None}]},
    )
    out = norm(body)
    assert out["schedulerId"] == "sched"
    assert out["taskGroupId"] == GROUP_ID
    assert out["dependencies"] == [DEP_A, DEP_B]
    assert out["requires"] == "all-resolved"
    assert out["routes"] == ["index.a", "notify.b"]
    assert out["priority"] == "very-high"
    assert out["retries"] == 0
    assert out["expires"] == "2026-05-31T12:00:00.000Z"
    assert out["scopes"] == ["queue:foo", "secrets:get:a*"]
    assert out["tags"] == {"purpose": "test"}
    assert out["extra"] == {"x": [1, {"y": None}]}


def test_normal_priority_is_lowest() -> None:
    assert norm(minimal(priority="normal"))["priority"] == "lowest"


def test_normalise_leaves_the_body_alone() -> None:
    body = minimal(priority="normal", routes=["a"])
    before = copy.deepcopy(body)
    norm(body)
    assert body == before


@pytest.mark.parametrize(
    "given",
    [
        {"taskQueueId": "proj/wt"},
        {"taskQueueId": "proj/wt", "provisionerId": "proj"},
        {"taskQueueId": "proj/wt", "workerType": "wt"},
        {"taskQueueId": "proj/wt", "provisionerId": "proj", "workerType": "wt"},
        {"provisionerId": "proj", "workerType": "wt"},
    ],
)
def test_worker_pool_in_either_form(given: dict[str, str]) -> None:
    body = minimal()
    del body["provisionerId"], body["workerType"]
    out = norm({**body, **given})
    assert (out["provisionerId"], out["workerType"], out["taskQueueId"]) == (
        "proj",
        "wt",
        "proj/wt",
    )


def test_contradicting_provisioner_id_is_rejected() -> None:
    message = rejects(minimal(taskQueueId="other/wt"))
    assert "provisionerId 'proj' contradicts taskQueueId 'other/wt'" in message


def test_contradicting_worker_type_is_rejected() -> None:
    message = rejects(minimal(taskQueueId="proj/other"))
    assert "workerType 'wt' contradicts taskQueueId 'proj/other'" in message


def test_missing_worker_pool_is_rejected() -> None:
    body = minimal()
    del body["workerType"]
    assert "needs taskQueueId, or provisionerId and workerType" in rejects(body)


def test_timestamps_are_normalised_to_utc_milliseconds() -> None:
    out = norm(
        minimal(
            created="2026-05-01T14:00:00.123456+02:00",
            deadline="2026-05-02T12:00:00z",
            expires="2026-06-01T00:00:00.5-01:00",
        )
    )
    assert out["created"] == "2026-05-01T12:00:00.123Z"
    assert out["deadline"] == "2026-05-02T12:00:00.000Z"
    assert out["expires"] == "2026-06-01T01:00:00.500Z"


@pytest.mark.parametrize("offset", [-15 * MINUTE, 15 * MINUTE])
def test_created_within_fifteen_minutes_is_accepted(offset: int) -> None:
    assert norm(minimal(created=at(NOW + offset)))["created"] == at(NOW + offset)


@pytest.mark.parametrize("offset", [-15 * MINUTE - 1, 15 * MINUTE + 1, -DAY])
def test_created_too_far_from_now_is_rejected(offset: int) -> None:
    message = rejects(minimal(created=at(NOW + offset)))
    assert f"created {at(NOW + offset)} is more than 15 minutes from the server's time" in message


@pytest.mark.parametrize("deadline", [NOW, NOW - 10 * MINUTE])
def test_deadline_not_in_the_future_is_rejected(deadline: int) -> None:
    created = deadline - MINUTE
    message = rejects(minimal(created=at(created), deadline=at(deadline)))
    assert f"deadline {at(deadline)} is not in the future" in message


def test_deadline_before_created_is_rejected() -> None:
    message = rejects(minimal(created=at(NOW + 10 * MINUTE), deadline=at(NOW + 5 * MINUTE)))
    assert "is before created" in message


def test_deadline_equal_to_created_is_accepted() -> None:
    out = norm(minimal(created=at(NOW + MINUTE), deadline=at(NOW + MINUTE)))
    assert out["deadline"] == out["created"]


def test_deadline_at_the_maximum_is_accepted() -> None:
    assert norm(minimal(deadline=at(NOW + MAX_DEADLINE)))["deadline"] == at(NOW + MAX_DEADLINE)


def test_deadline_past_the_maximum_names_the_maximum() -> None:
    message = rejects(minimal(deadline=at(NOW + MAX_DEADLINE + 1)))
    assert "too far in the future" in message
    assert "the maximum is 5 days from now, 2026-05-06T12:00:00.000Z" in message


def test_maximum_in_other_units() -> None:
    with pytest.raises(InputError, match="the maximum is 90 minutes from now"):
        normalise(
            TASK_ID, minimal(deadline=at(NOW + 2 * HOUR)), now=NOW, max_deadline_ms=90 * MINUTE
        )


def test_expires_before_deadline_is_rejected() -> None:
    message = rejects(minimal(expires=at(NOW + DAY - 1)))
    assert "expires 2026-05-02T11:59:59.999Z is before deadline 2026-05-02T12:00:00.000Z" in (
        message
    )


def test_expires_equal_to_deadline_is_accepted() -> None:
    assert norm(minimal(expires=at(NOW + DAY)))["expires"] == at(NOW + DAY)


def test_default_expires_after_29_february_is_1_march() -> None:
    now = from_iso("2028-02-28T12:00:00.000Z")
    body = minimal(created=at(now), deadline="2028-02-29T10:00:00.000Z")
    out = normalise(TASK_ID, body, now=now, max_deadline_ms=MAX_DEADLINE)
    assert out["expires"] == "2029-03-01T10:00:00.000Z"


def test_duplicate_dependencies_are_rejected() -> None:
    assert f"dependencies lists {DEP_A!r} more than once" in rejects(
        minimal(dependencies=[DEP_A, DEP_B, DEP_A])
    )


def test_duplicate_routes_are_rejected() -> None:
    assert "routes lists 'r' more than once" in rejects(minimal(routes=["r", "r"]))


def test_depending_on_itself_is_rejected() -> None:
    assert f"task {TASK_ID} can't depend on itself" in rejects(minimal(dependencies=[TASK_ID]))


def test_scope_ending_in_two_stars_is_rejected() -> None:
    message = rejects(minimal(scopes=["queue:ok", "queue:**"]))
    assert "scope 'queue:**' ends in '**'" in message


def test_scope_with_one_trailing_star_and_inner_stars_is_accepted() -> None:
    assert norm(minimal(scopes=["a*", "b**c"]))["scopes"] == ["a*", "b**c"]


def test_unparseable_time_is_an_input_error() -> None:
    assert "created 'soon' is not a date-time" in rejects(minimal(created="soon"))


# --- idempotency -------------------------------------------------------------------------


def test_same_body_matches() -> None:
    assert definitions_match(norm(minimal()), norm(minimal()))


def test_representation_differences_match() -> None:
    first = minimal(priority="normal")
    second = minimal(
        priority="lowest",
        schedulerId="-",
        retries=5,
        created="2026-05-01T14:00:00+02:00",
        routes=[],
        expires=at(NOW + DAY + 365 * DAY),
    )
    del second["provisionerId"], second["workerType"]
    second["taskQueueId"] = "proj/wt"
    assert definitions_match(norm(first), norm(second))


def test_stored_json_round_trip_matches() -> None:
    definition = norm(minimal(extra={"n": 1.5, "flag": True}))
    assert definitions_match(json.loads(json.dumps(definition)), definition)


@pytest.mark.parametrize(
    "change",
    [
        {"payload": {"command": ["false"]}},
        {"priority": "low"},
        {"retries": 4},
        {"routes": ["a"]},
        {"created": at(NOW + 1)},
        {"deadline": at(NOW + DAY + 1)},
        {"tags": {"k": "v"}},
        {"taskGroupId": GROUP_ID},
    ],
)
def test_any_real_difference_does_not_match(change: dict[str, Any]) -> None:
    assert not definitions_match(norm(minimal()), norm(minimal(**change)))


def test_list_order_matters() -> None:
    a = norm(minimal(dependencies=[DEP_A, DEP_B]))
    b = norm(minimal(dependencies=[DEP_B, DEP_A]))
    assert not definitions_match(a, b)


def test_json_booleans_are_not_numbers() -> None:
    a = norm(minimal(payload={"x": True}))
    b = norm(minimal(payload={"x": 1}))
    assert not definitions_match(a, b)


def test_integral_floats_equal_integers() -> None:
    a = norm(minimal(payload={"x": 1, "y": [0]}))
    b = norm(minimal(payload={"x": 1.0, "y": [0.0]}))
    assert definitions_match(a, b)


def test_key_order_does_not_matter_but_keys_do() -> None:
    a = norm(minimal(extra={"a": 1, "b": 2}))
    b = norm(minimal(extra={"b": 2, "a": 1}))
    c = norm(minimal(extra={"a": 1, "b": 2, "c": None}))
    assert definitions_match(a, b)
    assert not definitions_match(a, c)


def test_strings_are_not_lists() -> None:
    a = norm(minimal(extra={"v": "ab"}))
    b = norm(minimal(extra={"v": ["a", "b"]}))
    assert not definitions_match(a, b)
    assert not definitions_match(b, a)


# --- scheduling fields -------------------------------------------------------------------------


def test_scheduling_fields_are_normalised_and_absent_ones_stay_absent() -> None:
    out = norm(
        minimal(
            notBefore="2026-05-01T14:00:00+02:00",
            retryDelay={"base": 5},
            retryPriority="normal",
            claimTimeout=30.0,
        )
    )
    assert out["notBefore"] == "2026-05-01T12:00:00.000Z"
    assert out["retryDelay"] == {"base": 5, "factor": 2}
    assert out["retryPriority"] == "lowest"
    assert out["claimTimeout"] == 30 and isinstance(out["claimTimeout"], int)
    assert norm(minimal(retryDelay={"schedule": [1, 2]}))["retryDelay"] == {"schedule": [1, 2]}
    plain = norm(minimal())
    assert not {"notBefore", "retryDelay", "retryPriority", "claimTimeout"} & plain.keys()


def test_not_before_after_the_deadline_is_refused() -> None:
    message = rejects(minimal(notBefore=at(NOW + DAY + 1)))
    assert "notBefore" in message and "after the deadline" in message
    assert norm(minimal(notBefore=at(NOW + DAY)))["notBefore"] == at(NOW + DAY)
    assert norm(minimal(notBefore=at(NOW - DAY)))["notBefore"] == at(NOW - DAY)


def test_a_deadline_in_year_9999_without_expires_is_an_input_error() -> None:
    message = rejects(minimal(deadline="9999-12-31T23:59:59.999Z"))
    assert "too far in the future" in message


def test_the_same_scheduling_fields_resent_are_the_same_definition() -> None:
    body = minimal(notBefore=at(NOW + HOUR), retryDelay={"schedule": [3]}, claimTimeout=60)
    assert definitions_match(norm(body), norm(copy.deepcopy(body)))
    assert not definitions_match(norm(body), norm({**body, "claimTimeout": 61}))


@pytest.mark.parametrize(
    "value",
    [
        {"payload": {}, "retries": 5, "deadline": "2030-01-01T00:00:00.000Z"},
        {"big": 2**70, "negative": -(2**64), "max": 2**64 - 1, "min": -(2**63)},
        {"digits in text": "1234567890123456789012", "fraction": 0.1234567890123456789},
        {"text": "Grüße ✓ 名前", "nested": [[1.5, -0.0, 1e300], {"a": None, "b": True}]},
    ],
    ids=["plain", "big integers", "long digit runs", "unicode and floats"],
)
def test_stored_json_reads_back_as_the_standard_library_reads_it(value: object) -> None:
    text = compact(value)
    read = exact_loads(text)
    assert read == json.loads(text) == value
    assert repr(read) == repr(json.loads(text))  # same types too: no int read as a float


def test_a_deduplication_key_is_kept_with_its_ttl_defaulting_to_zero() -> None:
    assert norm(minimal(deduplicationKey="k"))["deduplicationTtl"] == 0
    out = norm(minimal(deduplicationKey=" spaces ~ ok ", deduplicationTtl=60.0))
    assert out["deduplicationKey"] == " spaces ~ ok "
    assert out["deduplicationTtl"] == 60 and isinstance(out["deduplicationTtl"], int)
    assert not {"deduplicationKey", "deduplicationTtl"} & norm(minimal()).keys()
    body = minimal(deduplicationKey="k")
    assert not definitions_match(norm(body), norm({**body, "deduplicationKey": "K"}))


def test_a_ttl_without_a_key_is_refused() -> None:
    message = rejects(minimal(deduplicationTtl=60))
    assert "deduplicationTtl is given without deduplicationKey" in message


def test_a_holder_keeps_its_key_until_resolved_plus_its_ttl() -> None:
    definition = norm(minimal(deduplicationKey="k", deduplicationTtl=60))
    pending = lifecycle.create(record_from_definition(TASK_ID, definition), now=NOW).record
    assert holds_key(pending, now=NOW + 10**12)
    run = dataclasses.replace(pending.runs[0], state="completed", resolved=NOW)
    resolved = pending.replace(runs=(run,))
    assert holds_key(resolved, now=NOW + 59_999)
    assert not holds_key(resolved, now=NOW + 60_000)
