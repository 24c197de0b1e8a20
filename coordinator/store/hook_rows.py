"""Mapping between the hooks' records (:mod:`coordinator.domain.hooks`) and the ``hooks`` and
``hook_last_fires`` tables' columns, the same for every driver (JSON columns are compact
text, read back exactly as written)."""

from __future__ import annotations

from typing import Any

from coordinator.domain.hooks import Hook, LastFire
from coordinator.domain.json_text import compact, exact_loads
from coordinator.store.rows import Row


def hook_key(hook_group_id: str, hook_id: str) -> dict[str, Any]:
    return {"hook_group_id": hook_group_id, "hook_id": hook_id}


def hook_columns(hook: Hook) -> dict[str, Any]:
    """Every column, by name (``version`` the one the row holds now)."""
    return {
        **hook_key(hook.hook_group_id, hook.hook_id),
        "metadata": compact(dict(hook.metadata)),
        "task": compact(dict(hook.task)),
        "schedule": compact(list(hook.schedule)),
        "trigger_schema": compact(dict(hook.trigger_schema)),
        "bindings": compact([dict(binding) for binding in hook.bindings]),
        "scopes": compact(list(hook.scopes)),
        "trigger_token": hook.trigger_token,
        "next_due": hook.next_due,
        "version": hook.version,
    }


def hook_from_row(row: Row) -> Hook:
    return Hook(
        hook_group_id=row["hook_group_id"],
        hook_id=row["hook_id"],
        metadata=exact_loads(row["metadata"]),
        task=exact_loads(row["task"]),
        schedule=tuple(exact_loads(row["schedule"])),
        trigger_schema=exact_loads(row["trigger_schema"]),
        bindings=tuple(exact_loads(row["bindings"])),
        scopes=tuple(exact_loads(row["scopes"])),
        trigger_token=row["trigger_token"],
        next_due=row["next_due"],
        version=row["version"],
    )


def last_fire_columns(fire: LastFire) -> dict[str, Any]:
    return {
        **hook_key(fire.hook_group_id, fire.hook_id),
        "task_id": fire.task_id,
        "fired_by": fire.fired_by,
        "task_create_time": fire.task_create_time,
        "result": fire.result,
        "error": fire.error,
    }


def last_fire_from_row(row: Row) -> LastFire:
    return LastFire(
        hook_group_id=row["hook_group_id"],
        hook_id=row["hook_id"],
        task_id=row["task_id"],
        fired_by=row["fired_by"],
        task_create_time=row["task_create_time"],
        result=row["result"],
        error=row["error"],
    )
