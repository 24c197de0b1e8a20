"""The pure rules of hooks (coordinator/domain/hooks.py): due times on an injected clock, the
taskId of a due time, templates and trigger payloads."""

from __future__ import annotations

import re

import pytest

from coordinator.domain import hooks
from coordinator.domain.errors import InputError
from coordinator.domain.records import from_iso, to_iso

T0 = from_iso("2026-03-01T10:00:00.000Z")


@pytest.mark.parametrize(
    ("schedule", "after", "due"),
    [
        (["*/2 * * * * *"], "2026-03-01T10:00:00.000Z", "2026-03-01T10:00:02.000Z"),
        (["*/2 * * * * *"], "2026-03-01T10:00:01.999Z", "2026-03-01T10:00:02.000Z"),
        (["0 0 * * 1"], "2026-03-01T10:00:00.000Z", "2026-03-02T00:00:00.000Z"),  # a Monday
        (["30 15 10 * * *"], "2026-03-01T10:00:00.000Z", "2026-03-01T10:15:30.000Z"),
        (["@daily"], "2026-03-01T10:00:00.000Z", "2026-03-02T00:00:00.000Z"),
        (["0 0 12 * * *", "0 0 11 * * *"], "2026-03-01T10:00:00.000Z", "2026-03-01T11:00:00.000Z"),
    ],
)
def test_next_due_is_the_earliest_time_after_the_reference_in_utc(
    schedule: list[str], after: str, due: str
) -> None:
    assert to_iso(hooks.next_due(schedule, from_iso(after)) or 0) == due


def test_an_empty_schedule_is_never_due() -> None:
    assert hooks.next_due([], T0) is None


@pytest.mark.parametrize(
    ("schedule", "index"),
    [(["nope"], 0), (["* * * *"], 0), (["0 0 0 * * * *"], 0), (["* * * * *", "61 * * * *"], 1)],
)
def test_check_schedule_names_the_pattern_cron_cannot_read(schedule: list[str], index: int) -> None:
    with pytest.raises(InputError, match=re.escape(f"schedule[{index}]")):
        hooks.check_schedule(schedule)


def test_the_task_id_of_a_due_time_is_a_slugid_the_same_everywhere() -> None:
    first = hooks.fire_task_id("g", "h", T0)
    assert hooks.SLUGID.fullmatch(first)
    assert first == hooks.fire_task_id("g", "h", T0)
    others = {
        hooks.fire_task_id("g", "h", T0 + 2000),
        hooks.fire_task_id("g", "h2", T0),
        hooks.fire_task_id("g2", "h", T0),
        hooks.fire_task_id("gh", "", T0),
    }
    assert first not in others and len(others) == 4


def test_render_task_fills_taskclusters_defaults_from_now() -> None:
    context = hooks.template_context(fired_by="schedule", task_id="tid", now=T0, payload={"n": 3})
    task = hooks.render_task({"payload": {"n": {"$eval": "payload.n * 2"}}}, context)
    assert task == {
        "payload": {"n": 6},
        "created": to_iso(T0),
        "deadline": to_iso(T0 + hooks.DEADLINE_MS),
        "expires": to_iso(T0 + hooks.EXPIRES_MS),
        "taskGroupId": "tid",
    }
    kept = hooks.render_task({"taskGroupId": "other", "deadline": "${now}"}, context)
    assert kept is not None and (kept["taskGroupId"], kept["deadline"]) == ("other", to_iso(T0))
    assert hooks.render_task({"$if": "firedBy == 'triggerHook'", "then": {}}, context) is None
    with pytest.raises(InputError, match="not an object"):
        hooks.render_task({"$eval": "[1]"}, context)


def test_check_template_refuses_what_is_not_json_e_but_not_what_a_payload_decides() -> None:
    hooks.check_template({"colour": "${payload.colour}"})  # depends on the payload
    for bad in ({"$nope": 1}, {"a": "${1 +}"}, {"$let": 1, "in": {}}):
        with pytest.raises(InputError, match=r"^task: not a valid JSON-e template"):
            hooks.check_template(bad)


def test_trigger_payloads_are_checked_against_the_trigger_schema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    hooks.check_trigger_schema(schema)
    hooks.check_payload(schema, {"n": 1})
    with pytest.raises(InputError, match=r"payload\['n'\]: 'x' is not of type 'integer'"):
        hooks.check_payload(schema, {"n": "x"})
    with pytest.raises(InputError, match="Additional properties"):
        hooks.check_payload(hooks.DEFAULT_TRIGGER_SCHEMA, {"n": 1})
    with pytest.raises(InputError, match=r"^triggerSchema\['type'\]"):
        hooks.check_trigger_schema({"type": "nothing"})


def test_a_hook_from_a_request_keeps_an_updated_hooks_token() -> None:
    body = {"metadata": {"name": "n", "description": "", "owner": "a@b.c"}, "task": {}}
    created = hooks.hook_from_request("g", "h", body, scopes=["s"], now=T0)
    assert created.schedule == () and created.next_due is None and created.scopes == ("s",)
    assert created.trigger_schema == hooks.DEFAULT_TRIGGER_SCHEMA
    updated = hooks.hook_from_request(
        "g", "h", {**body, "schedule": ["0 * * * *"]}, scopes=[], now=T0, existing=created
    )
    assert updated.trigger_token == created.trigger_token
    assert updated.next_due == T0 + 3_600_000
    with pytest.raises(InputError, match=r"^hookId"):
        hooks.hook_from_request("g", "h", {**body, "hookId": "x"}, scopes=[], now=T0)
