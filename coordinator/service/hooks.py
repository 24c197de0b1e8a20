"""The hooks service (docs/hooks.md): hooks over the store, their fires, and the scheduler's
pass.

A fire renders the hook's task template (:mod:`coordinator.domain.hooks`) and creates the task
through a :class:`TaskCreator`, which the app hands in: createTask as a client holding the
hook's scopes would call it (the request checks, the scopes and the task service live above and
beside this layer). Every fire that gets as far as createTask is recorded as a last fire,
successful or with the error, and counted (``hooks_fires_total{hookGroupId,result}``).

**Pulse messages.** With publishing on, createHook, updateHook and removeHook announce the
change as Taskcluster's hooks service does (hook-created, hook-updated, hook-deleted,
:func:`~coordinator.domain.events.hook_event`), written to the outbox in the transaction of the
write; a createHook repeated with the same definition, or a removeHook of no hook, writes
nothing and announces it all the same (as Taskcluster does), in a transaction of its own.

**Exactly one task per due time.** :meth:`HookService.fire_due` fires each hook whose
``next_due`` has come under the taskId derived from the hook and that due time, with ``now`` =
the due time, then advances ``next_due`` by compare-and-set. Any number of replicas may fire the
same due time, and a replica killed after createTask fires it again on the next pass: each asks
for the same task under the same id, which createTask answers idempotently, and the last fire is
keyed by the taskId. A due time whose createTask failed for a reason that may pass (the store is
unavailable) is not advanced, so the next pass tries it again; a refusal (a scope missing, a
definition createTask rejects) is a failed last fire, and the schedule moves on. A coordinator
that was down past several due times fires the first of them once, then schedules from now.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import slugid

from coordinator.domain import hooks
from coordinator.domain.errors import Conflict, DomainError, InputError, NotFound
from coordinator.domain.events import QueueEvent, hook_event
from coordinator.domain.hooks import FiredBy, Hook, LastFire
from coordinator.domain.records import TaskState
from coordinator.service.clock import Clock
from coordinator.service.metrics import ServiceMetrics
from coordinator.store.base import Store

log = logging.getLogger(__name__)

DUE_BATCH = 100
"""Hooks fired per scheduler pass at most (a busy pass runs again at once)."""

LAST_FIRE_TTL_MS = 365 * 24 * 3600 * 1000
"""How long a last fire is kept (Taskcluster's year)."""


class TaskCreator(Protocol):
    """createTask on behalf of a hook."""

    async def __call__(self, task_id: str, task: dict[str, Any], *, scopes: Sequence[str]) -> None:
        """Create ``task`` as ``task_id`` as a client holding ``scopes`` would.

        :raises DomainError: createTask refuses it (``Forbidden`` for a scope the hook lacks,
            ``InputError``, ``Conflict``); the message says why.
        """


class HookService:
    """The hooks of the store, and firing them.

    :param create_task: see :class:`TaskCreator`.
    :param publish_events: write the hooks' Pulse messages to the outbox.
    """

    def __init__(
        self,
        *,
        store: Store,
        create_task: TaskCreator,
        clock: Clock,
        metrics: ServiceMetrics,
        publish_events: bool = False,
    ) -> None:
        self.store = store
        self._create_task = create_task
        self.clock = clock
        self._metrics = metrics
        self._publish_events = publish_events

    def _events(self, exchange: str, hook_group_id: str, hook_id: str) -> list[QueueEvent]:
        """The message of a change to the hook (none with publishing off)."""
        if not self._publish_events:
            return []
        return [hook_event(exchange, hook_group_id, hook_id)]

    # --- definitions ----------------------------------------------------------------------

    async def get(self, hook_group_id: str, hook_id: str) -> Hook:
        """:raises NotFound: no such hook."""
        hook = await self.store.get_hook(hook_group_id, hook_id)
        if hook is None:
            raise NotFound(f"No such hook: {hook_group_id}/{hook_id}")
        return hook

    async def group(self, hook_group_id: str) -> list[Hook]:
        """:raises NotFound: the group has no hook (as Taskcluster answers)."""
        found = await self.store.hooks_in_group(hook_group_id)
        if not found:
            raise NotFound(f"No such hook group: {hook_group_id}")
        return found

    async def groups(self) -> list[str]:
        return await self.store.hook_groups()

    async def create(
        self, hook_group_id: str, hook_id: str, body: Mapping[str, Any], *, scopes: Sequence[str]
    ) -> Hook:
        """A new hook; repeating the call with the same definition returns the stored one.

        :raises InputError: a field is unusable (see :func:`hooks.hook_from_request`).
        :raises Conflict: another definition is stored under the id.
        """
        hook = hooks.hook_from_request(
            hook_group_id, hook_id, body, scopes=scopes, now=self.clock()
        )
        created = self._events("hook-created", hook_group_id, hook_id)
        if await self.store.insert_hook(hook, events=created):
            log.info("hook created hookGroupId=%s hookId=%s", hook_group_id, hook_id)
            return hook
        existing = await self.get(hook_group_id, hook_id)
        if existing.definition() != hook.definition():
            raise Conflict(f"hook `{hook_group_id}/{hook_id}` already exists.")
        await self.store.append_events(created)
        return existing

    async def update(
        self, hook_group_id: str, hook_id: str, body: Mapping[str, Any], *, scopes: Sequence[str]
    ) -> Hook:
        """Replace the hook's definition (and the scopes its tasks are created with),
        scheduled afresh from now.

        :raises NotFound: no such hook.
        :raises InputError: as :meth:`create`.
        """
        while True:
            existing = await self.get(hook_group_id, hook_id)
            hook = hooks.hook_from_request(
                hook_group_id, hook_id, body, scopes=scopes, now=self.clock(), existing=existing
            )
            stored = await self.store.compare_and_set_hook(
                hook, events=self._events("hook-updated", hook_group_id, hook_id)
            )
            if stored is not None:
                log.info("hook updated hookGroupId=%s hookId=%s", hook_group_id, hook_id)
                return stored

    async def remove(self, hook_group_id: str, hook_id: str) -> None:
        """Delete the hook and its last fires (nothing when there is no such hook)."""
        deleted = self._events("hook-deleted", hook_group_id, hook_id)
        if await self.store.delete_hook(hook_group_id, hook_id, events=deleted):
            log.info("hook removed hookGroupId=%s hookId=%s", hook_group_id, hook_id)
        else:
            await self.store.append_events(deleted)

    async def reset_trigger_token(self, hook_group_id: str, hook_id: str) -> str:
        """A new trigger token; the previous one stops working.

        :raises NotFound: no such hook.
        """
        while True:
            hook = await self.get(hook_group_id, hook_id)
            token: str = slugid.nice()
            stored = await self.store.compare_and_set_hook(
                dataclasses.replace(hook, trigger_token=token)
            )
            if stored is not None:
                return token

    # --- fires ----------------------------------------------------------------------------

    async def last_fire(self, hook: Hook) -> LastFire | None:
        fires = await self.store.last_fires(hook.hook_group_id, hook.hook_id, limit=1, before=None)
        return fires[0] if fires else None

    async def last_fires(
        self, hook_group_id: str, hook_id: str, *, limit: int, before: tuple[int, str] | None
    ) -> list[tuple[LastFire, TaskState | None]]:
        """A page of the hook's fires, the newest first (see :meth:`Store.last_fires`), each
        with its task's state now (``None``: the task does not exist, or no longer).

        :raises NotFound: the hook has no fire there (Taskcluster's answer).
        """
        fires = await self.store.last_fires(hook_group_id, hook_id, limit=limit, before=before)
        if not fires:
            raise NotFound(f"No such hook or never fired: {hook_group_id}/{hook_id}")
        states = await self.store.states([fire.task_id for fire in fires])
        return [(fire, states.get(fire.task_id)) for fire in fires]

    async def expire_last_fires(self, limit: int) -> int:
        """Delete up to ``limit`` last fires older than :data:`LAST_FIRE_TTL_MS`; how many."""
        return await self.store.expire_last_fires(self.clock() - LAST_FIRE_TTL_MS, limit)

    async def trigger(
        self,
        hook: Hook,
        payload: Mapping[str, Any],
        *,
        fired_by: FiredBy,
        client_id: str | None = None,
    ) -> str | None:
        """Fire ``hook`` now with ``payload`` (triggerHook, triggerHookWithToken): the taskId
        created, or ``None`` when the template declined.

        :raises InputError: the payload does not match the hook's triggerSchema, or its
            ``taskId`` is not a slugid.
        :raises DomainError: the fire failed (recorded as a failed last fire too).
        """
        hooks.check_payload(hook.trigger_schema, payload)
        given = payload.get("taskId")
        if given is not None and not (isinstance(given, str) and hooks.SLUGID.fullmatch(given)):
            raise InputError(f"payload.taskId: {given!r} is not a slugid")
        task_id: str = slugid.nice() if given is None else given
        now = self.clock()
        context = hooks.template_context(
            fired_by=fired_by, task_id=task_id, now=now, payload=payload, client_id=client_id
        )
        return await self._fire(hook, context, fired_by=fired_by)

    async def fire_due(self, limit: int = DUE_BATCH) -> int:
        """The scheduler's pass: fire every hook whose due time has come, each once, and
        schedule its next; how many were due."""
        due = await self.store.due_hooks(self.clock(), limit)
        await asyncio.gather(*(self._fire_scheduled(hook) for hook in due))
        return len(due)

    async def _fire_scheduled(self, hook: Hook) -> None:
        assert hook.next_due is not None  # due_hooks returns scheduled hooks only
        context = hooks.template_context(
            fired_by="schedule",
            task_id=hooks.fire_task_id(hook.hook_group_id, hook.hook_id, hook.next_due),
            now=hook.next_due,
            payload={},
        )
        # A refused fire is recorded as a failed last fire, and the schedule moves on.
        with contextlib.suppress(DomainError):
            await self._fire(hook, context, fired_by="schedule")
        # After the fire: a replica killed before this line fires the same due time again,
        # which creates nothing new. Lost to another replica or an update: theirs stands.
        following = hooks.next_due(hook.schedule, max(hook.next_due, self.clock()))
        await self.store.compare_and_set_hook(dataclasses.replace(hook, next_due=following))

    async def _fire(
        self, hook: Hook, context: Mapping[str, Any], *, fired_by: FiredBy
    ) -> str | None:
        """Render and create the hook's task for ``context``; record and count the fire.

        Outages (the store unreachable) propagate unrecorded: the fire did not happen.
        """
        task_id: str = context["taskId"]
        try:
            task = hooks.render_task(hook.task, context)
            if task is None:
                log.info(
                    "hook fire declined hookGroupId=%s hookId=%s firedBy=%s",
                    hook.hook_group_id,
                    hook.hook_id,
                    fired_by,
                )
                return None
            await self._create_task(task_id, task, scopes=hook.scopes)
        except DomainError as error:
            await self._record(hook, task_id, fired_by, error=error)
            raise
        await self._record(hook, task_id, fired_by)
        return task_id

    async def _record(
        self, hook: Hook, task_id: str, fired_by: FiredBy, *, error: DomainError | None = None
    ) -> None:
        result: hooks.FireResult = "success" if error is None else "error"
        recorded = await self.store.insert_last_fire(
            LastFire(
                hook_group_id=hook.hook_group_id,
                hook_id=hook.hook_id,
                fired_by=fired_by,
                task_id=task_id,
                task_create_time=self.clock(),
                result=result,
                error="" if error is None else hooks.error_text(error),
            )
        )
        if not recorded:
            return  # a scheduled fire repeated (another replica, a crash): counted already
        self._metrics.hook_fired(hook.hook_group_id, result)
        log.log(
            logging.INFO if error is None else logging.WARNING,
            "hook fired hookGroupId=%s hookId=%s firedBy=%s taskId=%s result=%s%s",
            hook.hook_group_id,
            hook.hook_id,
            fired_by,
            task_id,
            result,
            "" if error is None else f" error={str(error)!r}",
        )
