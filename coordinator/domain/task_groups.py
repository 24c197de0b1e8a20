"""Task groups as records: the schedulerId every task of the group shares, the latest expiry
of its tasks, and when it was sealed (no task may join a sealed group)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinator.domain.records import to_iso


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskGroup:
    """One task group.

    :param expires: the latest ``expires`` of its tasks (epoch ms); the group goes with them.
    :param sealed: when it was sealed, or ``None``.
    """

    task_group_id: str
    scheduler_id: str
    expires: int
    sealed: int | None = None

    def to_api(self) -> dict[str, Any]:
        """The group as getTaskGroup and sealTaskGroup answer it."""
        body: dict[str, Any] = {
            "taskGroupId": self.task_group_id,
            "schedulerId": self.scheduler_id,
            "expires": to_iso(self.expires),
        }
        if self.sealed is not None:
            body["sealed"] = to_iso(self.sealed)
        return body
