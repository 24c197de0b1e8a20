"""What both SQL drivers share: every read whose SQL differs only in its dialect.

A driver subclasses :class:`SQLStore` and supplies :meth:`SQLStore._fetch`, which runs a named
statement of its ``queries.sql`` with keyword parameters; the scans, listings and counts here
are then written once.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, cast

import orjson

from coordinator.domain.artifacts import Artifact
from coordinator.domain.clients import AuditEntry, Role, Roles, StoredClient
from coordinator.domain.events import QueueEvent
from coordinator.domain.hooks import Hook, LastFire
from coordinator.domain.index import IndexedTask, Namespace
from coordinator.domain.json_text import compact
from coordinator.domain.listings import Key, Page, PendingCount, RunCounts, keyed_page
from coordinator.domain.progress import RunProgress
from coordinator.domain.purge_cache import PurgeRequest
from coordinator.domain.queue_controls import Limits, Pause, QueueControls, QueueDefaults
from coordinator.domain.records import Run, TaskRecord, TaskState
from coordinator.domain.secrets import StoredSecret
from coordinator.domain.task_filters import FilterState, TaskCounts, TaskFilter
from coordinator.domain.task_groups import TaskGroup
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.workers import (
    ProvisionerRecord,
    QuarantineNote,
    TaskQueueRecord,
    WorkerKey,
    WorkerRecord,
)
from coordinator.store.artifact_rows import (
    artifact_from_row,
    details_json,
    key_columns,
)
from coordinator.store.auth_rows import (
    audit_columns,
    audit_from_row,
    client_columns,
    client_from_row,
    prefix_range,
    role_columns,
    role_from_row,
)
from coordinator.store.base import Store
from coordinator.store.hook_rows import (
    hook_columns,
    hook_from_row,
    hook_key,
    last_fire_columns,
    last_fire_from_row,
)
from coordinator.store.index_rows import (
    indexed_task_columns,
    indexed_task_from_row,
    namespace_columns,
    namespace_from_row,
)
from coordinator.store.rows import Row, page_from_rows, record_from_row
from coordinator.store.worker_rows import (
    after_names,
    after_time,
    controls_from_row,
    note_json,
    provisioner_from_row,
    task_queue_columns,
    task_queue_from_row,
    worker_columns,
    worker_from_row,
    worker_key_from_row,
)


class SQLStore(Store, abc.ABC):
    """A :class:`Store` on named SQL statements."""

    @abc.abstractmethod
    async def _fetch(self, name: str, **params: Any) -> Sequence[Row]:
        """All rows of the named statement."""

    @abc.abstractmethod
    async def _fetch_announcing(
        self, name: str, events: Sequence[QueueEvent], **params: Any
    ) -> Sequence[Row]:
        """All rows of the named statement, and ``events`` in the outbox in the same
        transaction if it returned any (a write that happened)."""

    @abc.abstractmethod
    async def _fetch_then(
        self,
        name: str,
        params: Mapping[str, Any],
        *,
        then: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
        events: Sequence[QueueEvent] = (),
    ) -> Sequence[Row]:
        """All rows of the named statement; if it returned any (a write that happened), then
        each ``(name, params)`` of ``then`` in order, the statement once per params, and
        ``events`` in the outbox, all in the same transaction."""

    @abc.abstractmethod
    async def _fetch_in(self, name: str, task_ids: Sequence[str]) -> Sequence[Row]:
        """All rows of the named statement for these task ids (none for none)."""

    @abc.abstractmethod
    async def _fetch_filtered(
        self, name: str, matching: TaskFilter, **params: Any
    ) -> Sequence[Row]:
        """All rows of the named statement with its ``{filters}`` the clause of ``matching``."""

    async def get(self, task_id: str) -> TaskRecord | None:
        rows = await self._fetch("get_task", task_id=task_id)
        return record_from_row(rows[0]) if rows else None

    async def get_many(self, task_ids: Sequence[str]) -> dict[str, TaskRecord]:
        rows = await self._fetch_in("get_many", task_ids)
        return {row["task_id"]: record_from_row(row) for row in rows}

    async def states(self, task_ids: Sequence[str]) -> dict[str, TaskState]:
        rows = await self._fetch_in("states", task_ids)
        return {row["task_id"]: cast(TaskState, row["state"]) for row in rows}

    async def runs_of(self, runs: Sequence[tuple[str, int]]) -> dict[tuple[str, int], Run]:
        rows = await self._fetch_in("runs_of", list(dict.fromkeys(task_id for task_id, _ in runs)))
        stored = {row["task_id"]: orjson.loads(row["runs"]) for row in rows}
        found: dict[tuple[str, int], Run] = {}
        for task_id, run_id in runs:
            task_runs = stored.get(task_id)
            if task_runs is not None and 0 <= run_id < len(task_runs):
                found[(task_id, run_id)] = Run.from_stored(task_runs[run_id])
        return found

    async def expired_claims(self, now: int, limit: int) -> list[tuple[str, int]]:
        rows = await self._fetch("expired_claims", now=now, limit=limit)
        return [(row["task_id"], row["taken_until"]) for row in rows]

    async def past_deadlines(self, now: int, limit: int) -> list[str]:
        return [row[0] for row in await self._fetch("past_deadlines", now=now, limit=limit)]

    async def hints_due(self, before: int, limit: int) -> list[str]:
        return [row[0] for row in await self._fetch("hints_due", before=before, limit=limit)]

    async def tasks_to_notify(self, limit: int) -> list[str]:
        return [row[0] for row in await self._fetch("tasks_to_notify", limit=limit)]

    async def task_group(
        self, task_group_id: str, *, limit: int, after: str | None
    ) -> Page[TaskRecord, str]:
        rows = await self._fetch(
            "task_group", task_group_id=task_group_id, after=after or "", limit=limit + 1
        )
        return page_from_rows(rows, limit)

    async def dependents(
        self, task_id: str, *, limit: int, after: str | None
    ) -> Page[TaskRecord, str]:
        rows = await self._fetch("dependents", task_id=task_id, after=after or "", limit=limit + 1)
        return page_from_rows(rows, limit)

    async def pending_by_task_queue(self) -> list[PendingCount]:
        return [
            PendingCount(
                task_queue=TaskQueue(row["provisioner_id"], row["worker_type"]),
                pending=row["pending"],
            )
            for row in await self._fetch("pending_by_task_queue")
        ]

    async def get_task_group(self, task_group_id: str) -> TaskGroup | None:
        rows = await self._fetch("get_task_group", task_group_id=task_group_id)
        return task_group_from_row(rows[0]) if rows else None

    async def seal_task_group(
        self, task_group_id: str, *, now: int, announce: bool = False
    ) -> TaskGroup | None:
        if announce:
            return await self._seal_announcing(task_group_id, now=now)
        rows = await self._fetch("seal_task_group", task_group_id=task_group_id, now=now)
        return task_group_from_row(rows[0]) if rows else None

    @abc.abstractmethod
    async def _seal_announcing(self, task_group_id: str, *, now: int) -> TaskGroup | None:
        """:meth:`seal_task_group` with its task-group-sealed written in its transaction."""

    async def task_group_size(self, task_group_id: str) -> int:
        rows = await self._fetch("task_group_size", task_group_id=task_group_id)
        return int(rows[0][0])

    async def unresolved_in_group(
        self, task_group_id: str, *, limit: int, after: str | None
    ) -> list[str]:
        rows = await self._fetch(
            "unresolved_in_group", task_group_id=task_group_id, after=after or "", limit=limit
        )
        return [row[0] for row in rows]

    async def run_counts(self, provisioner_id: str, worker_type: str, *, now: int) -> RunCounts:
        rows = await self._fetch(
            "run_counts", provisioner_id=provisioner_id, worker_type=worker_type, now=now
        )
        row = rows[0]
        return RunCounts(pending=row["pending"], delayed=row["delayed"], running=row["running"])

    # --- the management API ---------------------------------------------------------------

    async def list_tasks(
        self, matching: TaskFilter, *, now: int, limit: int, after: str | None
    ) -> Page[TaskRecord, str]:
        rows = await self._fetch_filtered(
            "list_tasks", matching, now=now, after=after or "", limit=limit + 1
        )
        return page_from_rows(rows, limit)

    async def matching_task_ids(
        self, matching: TaskFilter, *, now: int, limit: int, after: str | None
    ) -> list[str]:
        rows = await self._fetch_filtered(
            "matching_task_ids", matching, now=now, after=after or "", limit=limit
        )
        return [row[0] for row in rows]

    async def count_tasks(self, matching: TaskFilter, *, now: int) -> TaskCounts:
        rows = await self._fetch_filtered("count_tasks", matching, now=now, after="")
        states: dict[FilterState, int] = {row["filter_state"]: row["tasks"] for row in rows}
        return TaskCounts(states=states)

    # --- task queues and workers ----------------------------------------------------------

    async def task_queue(self, task_queue: TaskQueue, *, now: int) -> TaskQueueRecord | None:
        rows = await self._fetch("task_queue", **task_queue_columns(task_queue), now=now)
        return task_queue_from_row(rows[0]) if rows else None

    async def task_queues(
        self, *, now: int, limit: int, after: Key | None, provisioner_id: str | None = None
    ) -> Page[TaskQueueRecord, Key]:
        rows = await self._fetch(
            "task_queues" if provisioner_id is None else "worker_types",
            provisioner_id=provisioner_id,
            now=now,
            limit=limit + 1,
            **after_names(after, "provisioner_id", "worker_type"),
        )
        return keyed_page(
            [task_queue_from_row(row) for row in rows],
            limit,
            lambda found: (found.task_queue.provisioner_id, found.task_queue.worker_type),
        )

    async def provisioner(self, provisioner_id: str, *, now: int) -> ProvisionerRecord | None:
        rows = await self._fetch("provisioner", provisioner_id=provisioner_id, now=now)
        return provisioner_from_row(rows[0]) if rows else None

    async def provisioners(
        self, *, now: int, limit: int, after: Key | None
    ) -> Page[ProvisionerRecord, Key]:
        rows = await self._fetch(
            "provisioners", now=now, limit=limit + 1, **after_names(after, "provisioner_id")
        )
        return keyed_page(
            [provisioner_from_row(row) for row in rows],
            limit,
            lambda found: (found.provisioner_id,),
        )

    async def worker(self, key: WorkerKey) -> WorkerRecord | None:
        rows = await self._fetch("worker", **worker_columns(key))
        return worker_from_row(rows[0]) if rows else None

    async def workers(
        self,
        task_queue: TaskQueue,
        *,
        now: int,
        quarantined: bool | None,
        limit: int,
        after: Key | None,
    ) -> Page[WorkerRecord, Key]:
        rows = await self._fetch(
            "workers",
            **task_queue_columns(task_queue),
            now=now,
            quarantined=quarantined,
            limit=limit + 1,
            **after_names(after, "worker_group", "worker_id"),
        )
        return keyed_page(
            [worker_from_row(row) for row in rows],
            limit,
            lambda found: (found.key.worker_group, found.key.worker_id),
        )

    async def quarantine_worker(
        self, key: WorkerKey, *, note: QuarantineNote, expires: int
    ) -> WorkerRecord | None:
        rows = await self._fetch(
            "quarantine_worker",
            **worker_columns(key),
            quarantine_until=note.quarantine_until,
            expires=expires,
            note=note_json(note),
        )
        return worker_from_row(rows[0]) if rows else None

    async def quarantined_workers(self, now: int) -> dict[WorkerKey, int]:
        rows = await self._fetch("quarantined_workers", now=now)
        return {worker_key_from_row(row): row["quarantine_until"] for row in rows}

    async def pending_runs(
        self, task_queue: TaskQueue, *, limit: int, after: Key | None
    ) -> Page[TaskRecord, Key]:
        rows = await self._fetch(
            "pending_runs",
            **task_queue_columns(task_queue),
            limit=limit + 1,
            **after_time(after, "visible_at"),
        )
        return keyed_page([record_from_row(row) for row in rows], limit, _pending_key)

    async def claimed_runs(
        self, task_queue: TaskQueue, *, limit: int, after: Key | None
    ) -> Page[TaskRecord, Key]:
        rows = await self._fetch(
            "claimed_runs",
            **task_queue_columns(task_queue),
            limit=limit + 1,
            **after_time(after, "started"),
        )
        return keyed_page([record_from_row(row) for row in rows], limit, _claimed_key)

    async def delete_expired_workers(self, now: int, limit: int) -> int:
        workers = await self._fetch("delete_expired_workers", now=now, limit=limit)
        task_queues = await self._fetch("delete_expired_task_queues", now=now, limit=limit)
        return len(workers) + len(task_queues)

    # --- artifacts --------------------------------------------------------------------------

    async def mark_uploaded(
        self, task_id: str, run_id: int, name: str, details: Mapping[str, Any]
    ) -> bool:
        rows = await self._fetch(
            "mark_uploaded", **key_columns(task_id, run_id, name), details=details_json(details)
        )
        return bool(rows)

    async def get_artifact(self, task_id: str, run_id: int, name: str) -> Artifact | None:
        rows = await self._fetch("get_artifact", **key_columns(task_id, run_id, name))
        return artifact_from_row(rows[0]) if rows else None

    async def artifact_content(self, task_id: str, run_id: int, name: str) -> bytes | None:
        rows = await self._fetch("artifact_content", **key_columns(task_id, run_id, name))
        return bytes(rows[0]["content"]) if rows and rows[0]["content"] is not None else None

    async def list_artifacts(
        self, task_id: str, run_id: int, *, after: str | None, limit: int
    ) -> Page[Artifact, str]:
        rows = await self._fetch(
            "list_artifacts", task_id=task_id, run_id=run_id, after=after or "", limit=limit + 1
        )
        return keyed_page([artifact_from_row(row) for row in rows], limit, _artifact_name)

    async def expired_artifacts(self, now: int, limit: int) -> list[Artifact]:
        rows = await self._fetch("expired_artifacts", now=now, limit=limit)
        return [artifact_from_row(row) for row in rows]

    async def artifacts_of_tasks(self, task_ids: Sequence[str]) -> list[Artifact]:
        return [
            artifact_from_row(row) for row in await self._fetch_in("artifacts_of_tasks", task_ids)
        ]

    # --- the event outbox -------------------------------------------------------------------

    async def outbox_depth(self) -> int:
        rows = await self._fetch("outbox_depth")
        return int(rows[0][0])

    # --- hooks ------------------------------------------------------------------------------

    async def insert_hook(self, hook: Hook, *, events: Sequence[QueueEvent] = ()) -> bool:
        columns = hook_columns(hook)
        del columns["version"]
        return bool(await self._fetch_announcing("insert_hook", events, **columns))

    async def get_hook(self, hook_group_id: str, hook_id: str) -> Hook | None:
        rows = await self._fetch("get_hook", **hook_key(hook_group_id, hook_id))
        return hook_from_row(rows[0]) if rows else None

    async def hooks_in_group(self, hook_group_id: str) -> list[Hook]:
        rows = await self._fetch("hooks_in_group", hook_group_id=hook_group_id)
        return [hook_from_row(row) for row in rows]

    async def hook_groups(self) -> list[str]:
        return [row[0] for row in await self._fetch("hook_groups")]

    async def compare_and_set_hook(
        self, hook: Hook, *, events: Sequence[QueueEvent] = ()
    ) -> Hook | None:
        rows = await self._fetch_announcing("compare_and_set_hook", events, **hook_columns(hook))
        return dataclasses.replace(hook, version=rows[0][0]) if rows else None

    async def delete_hook(
        self, hook_group_id: str, hook_id: str, *, events: Sequence[QueueEvent] = ()
    ) -> bool:
        key = hook_key(hook_group_id, hook_id)
        await self._fetch("delete_last_fires", **key)
        return bool(await self._fetch_announcing("delete_hook", events, **key))

    async def due_hooks(self, now: int, limit: int) -> list[Hook]:
        return [hook_from_row(row) for row in await self._fetch("due_hooks", now=now, limit=limit)]

    async def insert_last_fire(self, fire: LastFire) -> bool:
        return bool(await self._fetch("insert_last_fire", **last_fire_columns(fire)))

    async def expire_last_fires(self, before: int, limit: int) -> int:
        return len(await self._fetch("expire_last_fires", before=before, limit=limit))

    async def last_fires(
        self, hook_group_id: str, hook_id: str, *, limit: int, before: tuple[int, str] | None
    ) -> list[LastFire]:
        before_time, before_task_id = (_LATEST, "") if before is None else before
        rows = await self._fetch(
            "last_fires",
            **hook_key(hook_group_id, hook_id),
            before_time=before_time,
            before_task_id=before_task_id,
            limit=limit,
        )
        return [last_fire_from_row(row) for row in rows]

    # --- the index --------------------------------------------------------------------------

    async def insert_indexed_task(self, entry: IndexedTask, *, now: int) -> IndexedTask:
        written = await self._fetch_then(
            "upsert_indexed_task",
            indexed_task_columns(entry, now=now),
            then=[("upsert_index_namespace", namespace_columns(entry))],
        )
        if written:
            return entry
        [stored] = await self.get_indexed_tasks([(entry.namespace, entry.name)])
        return stored

    async def get_indexed_tasks(self, paths: Sequence[tuple[str, str]]) -> list[IndexedTask]:
        if not paths:
            return []
        if len(paths) == 1:
            [(namespace, name)] = paths
            rows = await self._fetch("get_indexed_task", namespace=namespace, entry_name=name)
        else:
            rows = await self._fetch("get_indexed_tasks", paths=compact([list(p) for p in paths]))
        return [indexed_task_from_row(row) for row in rows]

    async def list_indexed_tasks(
        self, namespace: str, *, now: int, limit: int, after: str | None
    ) -> list[IndexedTask]:
        rows = await self._fetch(
            "list_indexed_tasks", namespace=namespace, after=after or "", now=now, limit=limit
        )
        return [indexed_task_from_row(row) for row in rows]

    async def list_namespaces(
        self, parent: str, *, now: int, limit: int, after: str | None
    ) -> list[Namespace]:
        rows = await self._fetch(
            "list_index_namespaces", parent=parent, after=after or "", now=now, limit=limit
        )
        return [namespace_from_row(row) for row in rows]

    async def delete_indexed_task(self, namespace: str, name: str) -> bool:
        return bool(await self._fetch("delete_indexed_task", namespace=namespace, entry_name=name))

    async def expire_index(self, now: int, limit: int) -> int:
        tasks = await self._fetch("expire_indexed_tasks", now=now, limit=limit)
        namespaces = await self._fetch("expire_index_namespaces", now=now, limit=limit)
        return len(tasks) + len(namespaces)

    # --- task-queue controls ----------------------------------------------------------------

    async def queue_controls(self) -> list[QueueControls]:
        return [controls_from_row(row) for row in await self._fetch("queue_controls")]

    async def queue_controls_of(self, task_queue: TaskQueue) -> QueueControls:
        rows = await self._fetch("queue_controls_of", **task_queue_columns(task_queue))
        return controls_from_row(rows[0]) if rows else QueueControls(task_queue=task_queue)

    async def pause_task_queue(self, task_queue: TaskQueue, pause: Pause | None) -> QueueControls:
        if pause is None:
            rows = await self._fetch("resume_task_queue", **task_queue_columns(task_queue))
        else:
            rows = await self._fetch(
                "pause_task_queue",
                **task_queue_columns(task_queue),
                paused_since=pause.since,
                paused_reason=pause.reason,
            )
        return controls_from_row(rows[0]) if rows else QueueControls(task_queue=task_queue)

    async def limit_task_queue(
        self, task_queue: TaskQueue, limits: Limits, *, named: frozenset[str]
    ) -> QueueControls:
        rows = await self._fetch(
            "limit_task_queue",
            **task_queue_columns(task_queue),
            max_running=limits.max_running,
            max_claims_per_second=limits.max_claims_per_second,
            set_max_running="maxRunning" in named,
            set_max_claims_per_second="maxClaimsPerSecond" in named,
            max_running_per_key=limits.max_running_per_key,
            set_max_running_per_key="maxRunningPerKey" in named,
        )
        return controls_from_row(rows[0])

    async def default_task_queue(
        self, task_queue: TaskQueue, defaults: QueueDefaults, *, named: frozenset[str]
    ) -> QueueControls:
        rows = await self._fetch(
            "default_task_queue",
            **task_queue_columns(task_queue),
            claim_timeout_s=defaults.claim_timeout_s,
            completed_ttl_s=defaults.completed_ttl_s,
            failed_ttl_s=defaults.failed_ttl_s,
            set_claim_timeout="claimTimeout" in named,
            set_completed_ttl="completedTTL" in named,
            set_failed_ttl="failedTTL" in named,
        )
        return controls_from_row(rows[0])

    async def set_claims_tat(self, task_queue: TaskQueue, claims_tat_us: int) -> None:
        await self._fetch(
            "set_claims_tat", **task_queue_columns(task_queue), claims_tat_us=claims_tat_us
        )

    async def running_by_key(self, task_queue: TaskQueue) -> dict[str, int]:
        rows = await self._fetch("running_by_key", **task_queue_columns(task_queue))
        return {row["concurrency_key"]: row["running"] for row in rows}

    async def give_back_claims(self, task_queue: TaskQueue, room_us: int) -> None:
        await self._fetch("give_back_claims", **task_queue_columns(task_queue), room_us=room_us)

    # --- auth: clients, roles, their audit history -----------------------------------------

    async def insert_client(
        self, client: StoredClient, *, audit: AuditEntry, events: Sequence[QueueEvent] = ()
    ) -> bool:
        columns = client_columns(client)
        del columns["version"]
        rows = await self._fetch_then(
            "insert_client", columns, then=_client_written(audit), events=events
        )
        return bool(rows)

    async def get_client(self, client_id: str) -> StoredClient | None:
        rows = await self._fetch("get_client", client_id=client_id)
        return client_from_row(rows[0]) if rows else None

    async def list_clients(
        self, *, prefix: str | None, limit: int, after: str | None
    ) -> list[StoredClient]:
        low, high = prefix_range(prefix)
        params = {"after": after or "", "low": low, "limit": limit}
        rows = await (
            self._fetch("list_clients", **params)
            if high is None
            else self._fetch("list_clients_below", **params, high=high)
        )
        return [client_from_row(row) for row in rows]

    async def all_clients(self) -> list[StoredClient]:
        return [client_from_row(row) for row in await self._fetch("all_clients")]

    async def update_client(
        self, client: StoredClient, *, audit: AuditEntry, events: Sequence[QueueEvent] = ()
    ) -> StoredClient | None:
        columns = client_columns(client)
        del columns["created"]
        rows = await self._fetch_then(
            "update_client", columns, then=_client_written(audit), events=events
        )
        return client_from_row(rows[0]) if rows else None

    async def delete_client(
        self, client_id: str, *, audit: AuditEntry, events: Sequence[QueueEvent] = ()
    ) -> bool:
        rows = await self._fetch_then(
            "delete_client", {"client_id": client_id}, then=_client_written(audit), events=events
        )
        return bool(rows)

    async def expired_clients(self, now: int, limit: int) -> list[StoredClient]:
        rows = await self._fetch("expired_clients", now=now, limit=limit)
        return [client_from_row(row) for row in rows]

    async def mark_clients_used(self, used: Mapping[str, int]) -> None:
        if used:
            await self._fetch("mark_clients_used", used=compact(dict(used)))

    async def get_roles(self) -> Roles:
        rows = await self._fetch("get_roles")
        return Roles(
            roles=tuple(role_from_row(row) for row in rows if row["role_id"] is not None),
            version=rows[0]["roles_version"],
        )

    async def write_roles(
        self,
        roles: Sequence[Role],
        *,
        expected_version: int,
        audit: Sequence[AuditEntry],
        events: Sequence[QueueEvent] = (),
    ) -> Roles | None:
        ordered = sorted(roles, key=_role_id)
        ids = [role.role_id for role in ordered]
        if len(set(ids)) != len(ids):
            raise ValueError("write_roles: two roles have one roleId")
        rows = await self._fetch_then(
            "write_roles_version",
            {"expected_version": expected_version},
            then=[
                ("delete_roles_except", [{"role_ids": compact(ids)}]),
                ("upsert_role", [role_columns(role) for role in ordered]),
                ("insert_audit_entry", [audit_columns(entry) for entry in audit]),
            ],
            events=events,
        )
        return Roles(roles=tuple(ordered), version=rows[0][0]) if rows else None

    async def auth_generation(self) -> int:
        rows = await self._fetch("auth_generation")
        return int(rows[0][0])

    async def audit_history(
        self,
        *,
        entity_type: str | None,
        entity_id: str | None,
        client_id: str | None,
        limit: int,
        after: tuple[int, int] | None,
    ) -> list[AuditEntry]:
        if entity_id is not None:
            if entity_type is None:
                raise ValueError("audit_history: an entity_id needs its entity_type")
            name = "audit_of_entity"
        elif client_id is not None:
            name = "audit_by_client"
        else:
            raise ValueError("audit_history: neither an entity nor a client")
        after_created, after_sequence = (_EARLIEST, 0) if after is None else after
        rows = await self._fetch(
            name,
            entity_type=entity_type,
            entity_id=entity_id,
            client_id=client_id,
            after_created=after_created,
            after_sequence=after_sequence,
            limit=limit,
        )
        return [audit_from_row(row) for row in rows]

    # --- secrets ----------------------------------------------------------------------------

    async def insert_secret(self, secret: StoredSecret, *, audit: AuditEntry) -> bool:
        rows = await self._fetch_then(
            "insert_secret", _secret_columns(secret), then=_audited(audit)
        )
        return bool(rows)

    async def update_secret(self, secret: StoredSecret, *, audit: AuditEntry) -> bool:
        rows = await self._fetch_then(
            "update_secret", _secret_columns(secret), then=_audited(audit)
        )
        return bool(rows)

    async def get_secret(self, name: str) -> StoredSecret | None:
        rows = await self._fetch("get_secret", secret_name=name)
        if not rows:
            return None
        row = rows[0]
        return StoredSecret(
            name=row["name"], encrypted_value=bytes(row["encrypted_value"]), expires=row["expires"]
        )

    async def list_secrets(self, *, now: int, limit: int, after: str | None) -> list[str]:
        rows = await self._fetch("list_secrets", now=now, after=after or "", limit=limit)
        return [row[0] for row in rows]

    async def delete_secret(
        self, name: str, *, audit: AuditEntry, expired_before: int | None = None
    ) -> bool:
        params = {"secret_name": name, "expired_before": expired_before}
        return bool(await self._fetch_then("delete_secret", params, then=_audited(audit)))

    async def expired_secrets(self, now: int, limit: int) -> list[str]:
        return [row[0] for row in await self._fetch("expired_secrets", now=now, limit=limit)]

    # --- purge-cache ------------------------------------------------------------------------

    async def purge_cache(self, request: PurgeRequest) -> PurgeRequest:
        rows = await self._fetch(
            "purge_cache",
            provisioner_id=request.task_queue.provisioner_id,
            worker_type=request.task_queue.worker_type,
            cache_name=request.cache_name,
            purge_before=request.before,
            expires=request.expires,
        )
        return _purge_request_from_row(rows[0])

    async def purge_requests(self, task_queue: TaskQueue, *, since: int) -> list[PurgeRequest]:
        rows = await self._fetch(
            "purge_requests",
            provisioner_id=task_queue.provisioner_id,
            worker_type=task_queue.worker_type,
            since=since,
        )
        return [_purge_request_from_row(row) for row in rows]

    async def all_purge_requests(
        self, *, limit: int, after: tuple[str, str, str] | None
    ) -> list[PurgeRequest]:
        provisioner_id, worker_type, cache_name = after or ("", "", "")
        rows = await self._fetch(
            "all_purge_requests",
            provisioner_id=provisioner_id,
            worker_type=worker_type,
            cache_name=cache_name,
            limit=limit,
        )
        return [_purge_request_from_row(row) for row in rows]

    async def expire_purge_requests(self, now: int, limit: int) -> int:
        return len(await self._fetch("expire_purge_requests", now=now, limit=limit))

    # --- run progress -----------------------------------------------------------------------

    async def set_run_progress(self, progress: RunProgress) -> bool:
        rows = await self._fetch(
            "set_run_progress",
            task_id=progress.task_id,
            run_id=progress.run_id,
            fraction=progress.fraction,
            message=progress.message,
            updated=progress.updated,
        )
        return bool(rows)

    async def run_progress(self, task_id: str) -> list[RunProgress]:
        rows = await self._fetch("run_progress", task_id=task_id)
        return [
            RunProgress(
                task_id=row["task_id"],
                run_id=row["run_id"],
                fraction=row["fraction"],
                message=row["message"],
                updated=row["updated"],
            )
            for row in rows
        ]


def _client_written(audit: AuditEntry) -> list[tuple[str, list[dict[str, Any]]]]:
    """What follows a write of a client in its transaction: the generation and the audit."""
    return [("bump_auth_generation", [{}]), *_audited(audit)]


def _audited(audit: AuditEntry) -> list[tuple[str, list[dict[str, Any]]]]:
    """What follows a write of a secret in its transaction: its audit entry."""
    return [("insert_audit_entry", [audit_columns(audit)])]


def _secret_columns(secret: StoredSecret) -> dict[str, Any]:
    return {
        "secret_name": secret.name,
        "encrypted_value": secret.encrypted_value,
        "expires": secret.expires,
    }


def _purge_request_from_row(row: Row) -> PurgeRequest:
    return PurgeRequest(
        task_queue=TaskQueue(row["provisioner_id"], row["worker_type"]),
        cache_name=row["cache_name"],
        before=row["purge_before"],
        expires=row["expires"],
    )


def _role_id(role: Role) -> str:
    return role.role_id


_EARLIEST = -(2**62)
"""Earlier than any audit entry: the first page of :meth:`SQLStore.audit_history` starts
after it."""

_LATEST = 2**62
"""Later than any fire: the first page of :meth:`SQLStore.last_fires` starts before it."""


def _artifact_name(artifact: Artifact) -> str:
    return artifact.name


def task_group_from_row(row: Row) -> TaskGroup:
    return TaskGroup(
        task_group_id=row["task_group_id"],
        scheduler_id=row["scheduler_id"],
        expires=row["expires"],
        sealed=row["sealed"],
    )


def _pending_key(record: TaskRecord) -> Key:
    assert record.visible_at is not None  # pending_runs lists pending last runs only
    return (record.visible_at, record.task_id)


def _claimed_key(record: TaskRecord) -> Key:
    run = record.last_run
    assert run is not None and run.started is not None  # claimed_runs: running last runs only
    return (run.started, record.task_id)


def deduplication_key_columns(record: TaskRecord, key: str, holder: str | None) -> dict[str, Any]:
    """The key statements' parameters: the key's row as ``record`` would hold it, and the
    holder it moves from (``None``: a free key)."""
    return {
        "task_queue_id": record.task_queue_id,
        "deduplication_key": key,
        "task_id": record.task_id,
        "expires": record.expires,
        "holder": holder,
    }
